------------------------- MODULE GroupCoordinatorLive -------------------------
(***************************************************************************)
(* Liveness of the group coordinator (GroupCoordinator.tla), with time.    *)
(*                                                                         *)
(* In Spec time is abstract: a timer may fire whenever it is armed, so a   *)
(* member that heartbeats may still see its session run out, and nothing  *)
(* can be said about members that keep their part.  Here every timer has   *)
(* a clock, counted in ticks:                                              *)
(*                                                                         *)
(*   - each member's session: restarted whenever the coordinator arms it   *)
(*     (SessionsArmed, the coordinator's own rule: a heartbeat, a commit,  *)
(*     an answered JoinGroup or SyncGroup, a restart), run out after       *)
(*     SessionTicks (a new member waiting in its first JoinGroup:          *)
(*     NewMemberTicks);                                                    *)
(*   - the join phase's and the pending-sync timers (JoinTimerArmed,       *)
(*     SyncTimerArmed), run out after RebalanceTicks.                      *)
(*                                                                         *)
(* A timer that has run out fires before time passes on (Tick is disabled *)
(* while one is due), as the adapter's timer loop does.                    *)
(*                                                                         *)
(* The clients: a new client may join at any time (ClientStart); the      *)
(* client holding a member id is live until it crashes.                   *)
(* A live client keeps its part, on its own clock: it sends a heartbeat    *)
(* at least every HeartbeatTicks (for the generation it was last told),   *)
(* rejoins as soon as a reply tells it to (REBALANCE_IN_PROGRESS,          *)
(* ILLEGAL_GENERATION, MEMBER_ID_REQUIRED, or its held-back request lost   *)
(* to a broker restart) and sends SyncGroup as soon as its JoinGroup is    *)
(* answered.  "As soon as": time does not pass while a live client owes a  *)
(* request.  These steps are weakly fair, and so is time.                  *)
(*                                                                         *)
(* Besides, the clients may perturb the group Budget times in all: any     *)
(* request of Next (any member id, any parameters: new members, leaves,   *)
(* metadata changes, stale generations, deletes), a broker restart, or a   *)
(* client crash; PerturbKinds says which of these kinds a model allows.    *)
(* The budget keeps the model finite without a CONSTRAINT or a VIEW: TLC   *)
(* explores every behaviour, and no behaviour is cut short                 *)
(* (GenerationBounded shows that the budget bounds the generations).       *)
(* Perturbations are never switched off: the budget is part of the state, *)
(* so a behaviour stops perturbing only by its own choice, and fairness    *)
(* (on timers, time and live clients only, never on Perturb or            *)
(* ClientStart) constrains the rest of every behaviour.                    *)
(*                                                                         *)
(* Properties: no timer ever removes a member whose client is live         *)
(* (NeverEvicted); every held-back JoinGroup and SyncGroup is answered     *)
(* (JoinsAnswered, SyncsAnswered; HeldBackAnswered: it never stops being   *)
(* held back without an answer, except when a restart drops its            *)
(* connection); the group ends settled (RebalanceCompletes) and a settled  *)
(* group of live members stays so (SettledStays); time always passes      *)
(* again (TimePasses: no client is left owing a request it cannot send).  *)
(* The model GroupCoordinator-liveness-no-rearm shows that NeverEvicted    *)
(* is not vacuous: with a coordinator that does not re-arm a session on a  *)
(* heartbeat, TLC finds the eviction.  GroupCoordinator-liveness-stuck-    *)
(* join does the same for JoinsAnswered: with a coordinator that ends only *)
(* a group's first join phase, TLC finds a JoinGroup held back forever.    *)
(***************************************************************************)
EXTENDS GroupCoordinator

CONSTANTS
    Budget,          \* how many perturbations the clients may make, in all
    PerturbKinds,    \* the kinds of perturbation they may make (within AllPerturbKinds)
    SessionTicks,    \* the session timeout
    HeartbeatTicks,  \* a live client sends a heartbeat at least this often
    RebalanceTicks,  \* the rebalance timeout: the join phase (and its initial delay), pending syncs
    NewMemberTicks   \* the new-member join timeout

\* Every kind of perturbation: a request of Next (any member id, any parameters),
\* a broker restart, a client crash.
AllPerturbKinds ==
    {"JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "DeleteGroups",
     "Restart", "Crash"}

ASSUME /\ Budget \in Nat
       /\ PerturbKinds \subseteq AllPerturbKinds
       /\ 0 < HeartbeatTicks /\ HeartbeatTicks < SessionTicks
       /\ HeartbeatTicks < RebalanceTicks /\ RebalanceTicks < NewMemberTicks

VARIABLES
    budget,   \* perturbations left
    age,      \* [Ids -> Nat]: ticks since the coordinator last armed each member's session
    joinAge,  \* ticks since the join phase's timer was armed
    syncAge,  \* ticks since the pending-sync timer was armed
    sent,     \* [Ids -> Nat]: ticks since each client last sent a heartbeat (the client's clock)
    live,     \* the member ids whose clients are live (an id not handed out yet counts as live)
    todo,     \* [Ids -> {"none", "join", "sync"}]: the request each client owes
    stale,    \* the ids whose client was not told the group's current generation
    evicted   \* history: a timer removed a member whose client is live

liveVars == <<vars, budget, age, joinAge, syncAge, sent, live, todo, stale, evicted>>

Ids == Range(MemberIds)
TimerActions == {"SessionTimeout", "PendingMemberTimeout", "RebalanceTimeout", "PendingSyncTimeout"}

-----------------------------------------------------------------------------
(* The timers a step arms.  In Spec time is abstract (every armed timer    *)
(* may fire at any moment), so which timers a step (re-)arms makes no      *)
(* difference there.  Here it does: a step restarts the clocks of the      *)
(* timers it arms (korvet/core/coordinator sets the deadline to now plus   *)
(* the timeout: rearm_session, complete_join, prepare_rebalance,          *)
(* restarted_group).  They are read off a step (grp, grp', out'), whose    *)
(* action `a` names.                                                      *)

\* A step ended the join phase with members: they all (re)start their sessions.
JoinPhaseEnded == grp'.state = "CompletingRebalance" /\ grp'.generation # grp.generation

\* The members whose heartbeat (of the current generation) a step accepted.
HeartbeatsAccepted ==
    {e.to : e \in {x \in out' : x.api = "Heartbeat" /\ x.err \in {NONE, REBALANCE_IN_PROGRESS}}}

\* The members a step (re-)arms the session of (for a new member waiting in
\* its first JoinGroup: the new-member join timeout).  Kafka: the places that
\* call rescheduleClassicGroupMemberHeartbeat.
SessionsArmed(a) ==
    LET before == DOMAIN grp.members
        after == DOMAIN grp'.members
        answered(api, errs) == {e.to : e \in {x \in out' : x.api = api /\ x.err \in errs}}
    IN after \cap
       IF a = "Restart" \/ JoinPhaseEnded THEN after
       ELSE \* joined, or took a static member's place
            (after \ before)
            \cup HeartbeatsAccepted
            \* an accepted commit of a member
            \cup answered("OffsetCommit", {NONE})
            \* a held-back SyncGroup answered: the leader's assignment, or a new rebalance
            \cup (IF grp.state = "CompletingRebalance"
                  THEN answered("SyncGroup", {NONE, REBALANCE_IN_PROGRESS}) ELSE {})

\* The join phase's timer (the rebalance timeout, or the initial delay): armed
\* when a rebalance starts, again when it ran out with nobody rejoined, and at
\* a restart.
JoinTimerArmed(a) ==
    /\ grp'.state = "PreparingRebalance"
    /\ grp.state # "PreparingRebalance" \/ a \in {"Restart", "RebalanceTimeout"}

\* The pending-sync timer (the rebalance timeout): armed when the join phase
\* ends, and at a restart.
SyncTimerArmed(a) == grp'.pendingSync # {} /\ (JoinPhaseEnded \/ a = "Restart")

Armed(a) == [sessions |-> SessionsArmed(a), join |-> JoinTimerArmed(a), sync |-> SyncTimerArmed(a)]

-----------------------------------------------------------------------------
(* The clients' view *)

Awaits(m) == IsMember(grp, m) /\ (grp.members[m].awaitingJoin \/ grp.members[m].awaitingSync)
\* A live member that is not waiting for an answer sends heartbeats.
Beats(m) == m \in live /\ IsMember(grp, m) /\ ~Awaits(m)
Inst(m) == IF IsMember(grp, m) THEN grp.members[m].instance ELSE NoInstance
FirstProtocols == CHOOSE p \in ProtocolChoices : TRUE
Protos(m) == IF IsMember(grp, m) THEN grp.members[m].protocols ELSE FirstProtocols
ClientGen(m) == IF m \in stale THEN StaleGen ELSE grp.generation

\* The replies to member m's requests (GroupCoordinator.tla: `to`).
RepliesTo(m) ==
    {e \in out' : e.api \in {"JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit"} /\ e.to = m}
Told(m, api, errs) == \E e \in RepliesTo(m) : e.api = api /\ e.err \in errs

\* What a client owes after a step: it waits while its request is held back;
\* otherwise the replies that reach it tell it: the reply to its own request
\* (`own`), or to its held-back one.  (A perturbation that uses its member id
\* is answered on another connection: the client does not see that reply.)
Reaches(m, own) == own \/ Awaits(m)
Owes(m, a, own) ==
    IF Awaits(m)' THEN "none"
    ELSE IF a = "Restart" /\ Awaits(m) THEN "join"     \* its connection died with the broker
    ELSE IF ~Reaches(m, own) THEN todo[m]
    ELSE IF Told(m, "JoinGroup", {NONE}) THEN "sync"
    ELSE IF \/ Told(m, "JoinGroup", {MEMBER_ID_REQUIRED})
            \/ \E api \in {"SyncGroup", "Heartbeat", "OffsetCommit"} :
                   Told(m, api, {REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION})
         THEN "join"
    ELSE "none"

\* What the clients learn from a step of the coordinator (action `a`; `client`:
\* the live client that sent it, or NoId), and the clocks the step restarts.
Coordinator(a, client) ==
    LET held == DOMAIN grp'.members \cup grp'.pending
        armed == SessionsArmed(a)
        told == {m \in Ids : /\ Reaches(m, m = client)
                             /\ \E e \in RepliesTo(m) : e.api = "JoinGroup" /\ e.err = NONE
                                                      /\ e.gen = grp'.generation}
    IN /\ live' = {m \in live : m \in held \/ m \notin KnownIds'}
       /\ todo' = [m \in Ids |-> IF m \in live' THEN Owes(m, a, m = client) ELSE "none"]
       /\ stale' = ((IF grp'.generation # grp.generation THEN Ids ELSE stale) \ told) \cap live'
       /\ age' = [m \in Ids |-> IF m \in armed \/ ~IsMember(grp', m) THEN 0 ELSE age[m]]
       /\ joinAge' = IF grp'.state # "PreparingRebalance" \/ JoinTimerArmed(a) THEN 0 ELSE joinAge
       /\ syncAge' = IF grp'.pendingSync = {} \/ SyncTimerArmed(a) THEN 0 ELSE syncAge
       /\ sent' = [m \in Ids |-> IF ~Beats(m)' \/ (a = "Heartbeat" /\ m = client) THEN 0
                                 ELSE sent[m]]
       /\ evicted' = \/ evicted
                     \/ /\ a \in TimerActions
                        /\ (live \cap DOMAIN grp.members) \ DOMAIN grp'.members # {}

-----------------------------------------------------------------------------
(* Perturbations: any request, a broker restart, a client crash *)

Crash ==
    \E m \in live \cap KnownIds :
        /\ live' = live \ {m}
        /\ todo' = [todo EXCEPT ![m] = "none"]
        /\ stale' = stale \ {m}
        /\ sent' = [sent EXCEPT ![m] = 0]
        /\ out' = {}
        /\ UNCHANGED <<grp, issued, calm, floor, age, joinAge, syncAge, evicted>>

Perturb ==
    /\ budget > 0
    /\ budget' = budget - 1
    /\ \/ "JoinGroup" \in PerturbKinds /\ JoinGroup /\ Coordinator("JoinGroup", NoId)
       \/ "SyncGroup" \in PerturbKinds /\ SyncGroup /\ Coordinator("SyncGroup", NoId)
       \/ "Heartbeat" \in PerturbKinds /\ Heartbeat /\ Coordinator("Heartbeat", NoId)
       \/ "LeaveGroup" \in PerturbKinds /\ LeaveGroup /\ Coordinator("LeaveGroup", NoId)
       \/ "OffsetCommit" \in PerturbKinds /\ OffsetCommit /\ Coordinator("OffsetCommit", NoId)
       \/ "DeleteGroups" \in PerturbKinds /\ DeleteGroups /\ Coordinator("DeleteGroups", NoId)
       \/ "Restart" \in PerturbKinds /\ Restart /\ Coordinator("Restart", NoId)
       \/ "Crash" \in PerturbKinds /\ Crash

-----------------------------------------------------------------------------
(* Live clients keeping their part (each step free and weakly fair) *)

ClientJoin(m) ==
    /\ m \in live /\ todo[m] = "join"
    /\ JoinGroupReq(m, Inst(m), Protos(m), TRUE, TRUE, FALSE)
    /\ Coordinator("JoinGroup", m)
    /\ UNCHANGED budget

ClientSync(m) ==
    /\ m \in live /\ todo[m] = "sync"
    /\ SyncGroupReq(m, Inst(m), ClientGen(m),
                    IF m = grp.leader /\ ClientGen(m) = grp.generation
                       /\ grp.state = "CompletingRebalance"
                    THEN [x \in DOMAIN grp.members |-> CHOOSE v \in Assignments : TRUE]
                    ELSE EmptyFcn,
                    NoName)
    /\ Coordinator("SyncGroup", m)
    /\ UNCHANGED budget

ClientHeartbeat(m) ==
    /\ Beats(m) /\ todo[m] = "none"
    /\ HeartbeatReq(m, Inst(m), ClientGen(m))
    /\ Coordinator("Heartbeat", m)
    /\ UNCHANGED budget

Client(m) == ClientJoin(m) \/ ClientSync(m) \/ ClientHeartbeat(m)

\* A new client joins (a consumer starting): JoinGroup v4+ with no member id, as
\* a dynamic member or under an instance id no member holds.  Free, and not
\* fair: clients may or may not come.
ClientStart ==
    /\ CanIssue
    /\ \E i \in Instances :
          /\ ~HasStatic(grp, i)
          /\ JoinGroupReq(NoId, i, FirstProtocols, TRUE, TRUE, FALSE)
    /\ Coordinator("JoinGroup", FreshId)
    /\ UNCHANGED budget

-----------------------------------------------------------------------------
(* Timers and time *)

Limit(m) == IF grp.members[m].isNew THEN NewMemberTicks ELSE SessionTicks
SessionDue(m) == IsMember(grp, m) /\ ~HeartbeatSatisfied(m) /\ age[m] >= Limit(m)
JoinDue == grp.state = "PreparingRebalance" /\ joinAge >= RebalanceTicks
SyncDue == grp.pendingSync # {} /\ syncAge >= RebalanceTicks
HeartbeatDue(m) == Beats(m) /\ sent[m] >= HeartbeatTicks
Owing(m) == m \in live /\ (todo[m] # "none" \/ HeartbeatDue(m))

TimerSession(m) ==
    /\ SessionDue(m) /\ SessionTimeoutOf(m) /\ Coordinator("SessionTimeout", NoId)
    /\ UNCHANGED budget
TimerJoin ==
    /\ JoinDue /\ RebalanceTimeout /\ Coordinator("RebalanceTimeout", NoId)
    /\ UNCHANGED budget
\* The join phase's timer ran out with nobody to answer (only static members that
\* did not rejoin): no step of Spec; the adapter arms it again.
TimerJoinIdle ==
    /\ JoinDue /\ CompleteJoin(grp) = <<grp, {}>>
    /\ joinAge' = 0
    /\ out' = {}
    /\ UNCHANGED <<grp, issued, calm, floor, budget, age, syncAge, sent, live, todo, stale,
                   evicted>>
TimerSync ==
    /\ SyncDue /\ PendingSyncTimeout /\ Coordinator("PendingSyncTimeout", NoId)
    /\ UNCHANGED budget
\* A member id handed out with MEMBER_ID_REQUIRED and not used: its timer has no
\* clock here (it may expire at any moment), as no member depends on it.
TimerPending(m) ==
    /\ PendingMemberTimeoutOf(m) /\ Coordinator("PendingMemberTimeout", NoId)
    /\ UNCHANGED budget
Cleanup == GroupDataDeleted /\ Coordinator("GroupDataDeleted", NoId) /\ UNCHANGED budget

\* Time passes when no timer has run out and no live client owes a request.
TimeCanPass ==
    /\ ~\E m \in DOMAIN grp.members : SessionDue(m)
    /\ ~JoinDue /\ ~SyncDue
    /\ ~\E m \in Ids : Owing(m)

Min(x, y) == IF x < y THEN x ELSE y

Tick ==
    /\ TimeCanPass
    /\ age' = [m \in Ids |-> IF IsMember(grp, m) THEN Min(age[m] + 1, Limit(m)) ELSE 0]
    /\ joinAge' = IF grp.state = "PreparingRebalance" THEN joinAge + 1 ELSE 0
    /\ syncAge' = IF grp.pendingSync # {} THEN syncAge + 1 ELSE 0
    /\ sent' = [m \in Ids |-> IF Beats(m) THEN sent[m] + 1 ELSE 0]
    /\ out' = {}
    /\ UNCHANGED <<grp, issued, calm, floor, budget, live, todo, stale, evicted>>

-----------------------------------------------------------------------------

LiveInit ==
    /\ Init
    /\ budget = Budget
    /\ age = [m \in Ids |-> 0]
    /\ joinAge = 0
    /\ syncAge = 0
    /\ sent = [m \in Ids |-> 0]
    /\ live = Ids
    /\ todo = [m \in Ids |-> "none"]
    /\ stale = Ids
    /\ evicted = FALSE

LiveNext ==
    \/ Perturb
    \/ \E m \in Ids : Client(m)
    \/ ClientStart
    \/ \E m \in Ids : TimerSession(m)
    \/ TimerJoin
    \/ TimerJoinIdle
    \/ TimerSync
    \/ \E m \in Ids : TimerPending(m)
    \/ Cleanup
    \/ Tick

LiveSpec ==
    /\ LiveInit /\ [][LiveNext]_liveVars
    /\ WF_liveVars(Tick)
    /\ \A m \in Ids : WF_liveVars(Client(m)) /\ WF_liveVars(TimerSession(m))
                      /\ WF_liveVars(TimerPending(m))
    /\ WF_liveVars(TimerJoin) /\ WF_liveVars(TimerJoinIdle) /\ WF_liveVars(TimerSync)
    /\ WF_liveVars(Cleanup)

-----------------------------------------------------------------------------
(* Properties *)

\* No timer removes a member whose client is live: its session never runs
\* out, it rejoins before the join phase ends, it syncs before the pending-sync
\* timer fires.  (Removals a client asks for are not evictions: a LeaveGroup,
\* a static member's new incarnation taking its place.)
NeverEvicted == ~evicted

\* The budget bounds the generations (so the state space is finite).
GenerationBounded == grp.generation <= 2 * Budget + 1

HeldJoin(m) == IsMember(grp, m) /\ grp.members[m].awaitingJoin
HeldSync(m) == IsMember(grp, m) /\ grp.members[m].awaitingSync

\* A held-back request stops being held back only with its answer in the same
\* step (a reply to that request: `to` is its member, whatever member id the reply
\* carries: a removed member's JoinGroup is told the empty one), or when a broker
\* restart drops its connection.
HeldBackAnswered ==
    [][\A m \in Ids :
          /\ HeldJoin(m) /\ ~HeldJoin(m)' =>
                \/ Restart
                \/ \E e \in out' : e.api = "JoinGroup" /\ e.to = m
          /\ HeldSync(m) /\ ~HeldSync(m)' =>
                \/ Restart
                \/ \E e \in out' : e.api = "SyncGroup" /\ e.to = m]_liveVars

JoinsAnswered == \A m \in Ids : HeldJoin(m) ~> ~HeldJoin(m)
SyncsAnswered == \A m \in Ids : HeldSync(m) ~> ~HeldSync(m)

Settled ==
    /\ grp.state \notin {"PreparingRebalance", "CompletingRebalance", "Dead"}
    /\ grp.pendingSync = {}

\* However the clients perturbed it, the group ends settled: Stable with every
\* member synced, or Empty, or gone ...
RebalanceCompletes == <>[]Settled

\* ... and a settled group whose members' clients are all live and owe no
\* request stays settled until a client perturbs it or a new client comes (members whose clients
\* crashed are removed when their sessions run out, which is a rebalance; a
\* client that owes a JoinGroup, say after MEMBER_ID_REQUIRED, finishes a
\* perturbation).
SettledStays ==
    [][/\ Settled /\ budget' = budget /\ issued' = issued   \* no perturbation, no new client
       /\ DOMAIN grp.members \cup grp.pending \subseteq live
       /\ \A m \in live : todo[m] = "none"
       => Settled']_liveVars

TimePasses == []<>TimeCanPass

\* A settled group holds no request back (an invariant).  With RebalanceCompletes
\* it gives JoinsAnswered and SyncsAnswered: if HeldJoin(m) holds at some moment
\* i, and the group is Settled at every moment from k on, then at moment
\* max(i, k) the group is settled, so ~HeldJoin(m) (the same for HeldSync(m)).
\* GroupCoordinator-liveness checks the two that way: each leads-to adds one
\* branch per member to TLC's liveness check, and TLC evaluates every fairness
\* condition again for each branch (checked directly, their four branches took
\* 27 of the model's 40 s).  The deep models check JoinsAnswered and
\* SyncsAnswered themselves.
SettledHoldsNothing == Settled => \A m \in Ids : ~HeldJoin(m) /\ ~HeldSync(m)

\* The broken coordinator of GroupCoordinator-liveness-no-rearm: a heartbeat does
\* not re-arm the member's session (the cfg substitutes it for HeartbeatsAccepted).
NoHeartbeatRearms == {}

\* The broken coordinator of GroupCoordinator-liveness-stuck-join: it ends a group's
\* first join phase (the one that started from Empty) but no later one: a join
\* phase that started from a Stable or CompletingRebalance group keeps waiting
\* as if nobody had rejoined (the cfg substitutes it for CompleteJoin; Spec is
\* GroupCoordinator.tla's, unchanged).
Spec0 == INSTANCE GroupCoordinator
FirstJoinPhaseOnly(g) == IF g.initialRebalance THEN Spec0!CompleteJoin(g) ELSE <<g, {}>>

\* One protocol, no metadata change (the CI liveness models).
ProtocolsOne == {<<<<"range", "a">>>>}

=============================================================================
