-------------------------- MODULE GroupCoordinator --------------------------
(***************************************************************************)
(* The group coordinator of Kafka's classic consumer-group protocol, as    *)
(* Korvet implements it (korvet/core/coordinator/).                        *)
(*                                                                         *)
(* One group is modelled: groups are independent of each other, and the    *)
(* Python machine keeps a map group id -> group whose steps touch one      *)
(* group only.  The variable `grp` is a record with the fields of the      *)
(* Python `Group` (same names, camelCase); `out` is the set of effects the *)
(* last step produced (replies, released held-back replies, offset writes, *)
(* clean-up orders), so a step of the spec is a call of Python's `step`.   *)
(*                                                                         *)
(* The environment is hostile: any client may send any request at any      *)
(* time with any member id it has ever been given (or one it invents),     *)
(* any instance id, a current or a stale generation.  Time is abstract:    *)
(* every armed timer may fire at any moment (SessionTimeout,               *)
(* PendingMemberTimeout, RebalanceTimeout, PendingSyncTimeout).  The       *)
(* broker may restart at any moment (Restart).                             *)
(*                                                                         *)
(* Authority: Apache Kafka's GroupMetadataManager / ClassicGroup (4.x),    *)
(* summarised in ../shared/reference/anchors.md §2.  Deliberate            *)
(* differences are marked KORVET below and listed in                       *)
(* docs/spec/group-coordinator.md.                                         *)
(***************************************************************************)
EXTENDS Integers, FiniteSets, Sequences

CONSTANTS
    MemberIds,        \* <<"m1", ...>>: the member ids the broker hands out, in order
    InstanceIds,      \* {"i1", ...}: group.instance.id values clients may send
    ProtocolChoices,  \* the protocol lists a JoinGroup may carry: <<<<name, metadata>>, ...>>
    ProtocolNames,    \* every protocol name, in lexicographic order (ties in the vote)
    Partitions,       \* partitions a commit may name
    Offsets,          \* offsets a commit may carry
    Assignments,      \* assignment values the leader may hand out
    GroupMaxSize,     \* group.max.size
    LeaveBatchMax,    \* longest LeaveGroup batch (v3+)
    MaxGeneration     \* CONSTRAINT: explore generations up to this one

ASSUME /\ Len(MemberIds) >= 1
       /\ GroupMaxSize >= 1
       /\ LeaveBatchMax >= 1
       /\ \A p \in ProtocolChoices : Len(p) >= 1

-----------------------------------------------------------------------------
(* Kafka's error codes (Errors.java) *)

NONE                        == 0
COORDINATOR_NOT_AVAILABLE   == 15
ILLEGAL_GENERATION          == 22
INCONSISTENT_GROUP_PROTOCOL == 23
UNKNOWN_MEMBER_ID           == 25
INVALID_SESSION_TIMEOUT     == 26
REBALANCE_IN_PROGRESS       == 27
NON_EMPTY_GROUP             == 68
GROUP_ID_NOT_FOUND          == 69
MEMBER_ID_REQUIRED          == 79
GROUP_MAX_SIZE_REACHED      == 81
FENCED_INSTANCE_ID          == 82

ProtocolType == "consumer"
NoId         == ""      \* JoinGroupRequest.UNKNOWN_MEMBER_ID; also "no leader"
NoInstance   == ""      \* no group.instance.id: a dynamic member
NoName       == ""      \* no protocol name / type
NoAssignment == ""      \* the empty assignment

States == {"Absent", "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"}

-----------------------------------------------------------------------------
VARIABLES
    grp,     \* the group (a record; "Absent" when the coordinator does not know it)
    out,     \* the effects of the last step
    issued,  \* how many ids of MemberIds the broker has handed out (the adapter's UUIDs)
    calm,    \* unused, always FALSE (GroupCoordinatorDurable names it; the liveness
             \* model, GroupCoordinatorLive.tla, counts perturbations instead)
    floor    \* the generation a new group starts from (0 here; see GroupCoordinatorDurable)

vars == <<grp, out, issued, calm, floor>>

Range(s) == {s[k] : k \in DOMAIN s}
EmptyFcn == [x \in {} |-> NONE]

NoLeaderSync == [gen |-> -1, asg |-> EmptyFcn]

\* What the coordinator holds for a group it does not know.
AbsentGroup ==
    [state            |-> "Absent",
     generation       |-> 0,
     protocolType     |-> NoName,
     protocolName     |-> NoName,
     leader           |-> NoId,
     members          |-> EmptyFcn,
     pending          |-> {},      \* member ids handed out with MEMBER_ID_REQUIRED
     pendingSync      |-> {},      \* members that have not sent SyncGroup for this generation
     initialRebalance |-> FALSE,   \* this PreparingRebalance started from Empty
     leaderSync       |-> NoLeaderSync,  \* the assignment the leader sent, and for which generation
     committed        |-> [p \in Partitions |-> -1]]

\* A new group starts from generation `floor`: 0, unless a load after Redis may have
\* lost writes raised it (spec/GroupCoordinatorDurable.tla; Python: generation_floor).
NewGroup == [AbsentGroup EXCEPT !.state = "Empty", !.generation = floor]

KnownIds == {MemberIds[k] : k \in 1..issued}
FreshId  == MemberIds[issued + 1]
CanIssue == issued < Len(MemberIds)

\* The order of member ids: Python compares the id strings (min()).  The models'
\* ids are handed out in that order ("m1" < "m2" < ...), so their rank is their
\* position in MemberIds; real ids (client id + UUID) are not: trace validation
\* (GroupCoordinatorTrace) binds Rank to the order of the logged ids' strings.
Rank(id) == CHOOSE k \in 1..Len(MemberIds) : MemberIds[k] = id
MinId(S) == CHOOSE m \in S : \A o \in S : Rank(m) <= Rank(o)

-----------------------------------------------------------------------------
(* Effects (the Python reply and order types; see spec/README.md)          *)
(*                                                                         *)
(* Every reply says which request it answers (`to`): the request of that   *)
(* kind of the member named, i.e. its latest one (the one the step got, or *)
(* the one the group holds back for it); NoId for a request no member id   *)
(* names (a new member's JoinGroup before it has an id, a LeaveGroup, a    *)
(* DeleteGroups).  The adapter sends a reply on the connection of the      *)
(* request it answers, so `to` is where the reply goes: a released reply   *)
(* given to another member's request would be another `to`.  For a        *)
(* JoinGroup reply `to` is not always `mid`, the member id it tells the    *)
(* client: a removed member's held-back JoinGroup is told the empty id.   *)
(* A successful JoinGroup reply lists, for the leader, every member as     *)
(* <<member id, instance id, metadata of the selected protocol>>.          *)

JoinReply(err, mid, gen, leader, proto, mems, skip) ==
    [api |-> "JoinGroup", to |-> mid, err |-> err, mid |-> mid, gen |-> gen,
     ptype |-> IF err = NONE THEN ProtocolType ELSE NoName, leader |-> leader,
     proto |-> proto, members |-> mems, skip |-> skip]
JoinError(err, mid) == JoinReply(err, mid, -1, NoId, NoName, {}, FALSE)
\* An error for the JoinGroup of member `to` that tells it the member id `mid`.
JoinErrorTo(to, err, mid) == [JoinError(err, mid) EXCEPT !.to = to]
SyncReply(to, err, proto, asg) ==
    [api |-> "SyncGroup", to |-> to, err |-> err,
     ptype |-> IF err = NONE THEN ProtocolType ELSE NoName, proto |-> proto, asg |-> asg]
SyncError(to, err) == SyncReply(to, err, NoName, NoAssignment)
HeartbeatReply(to, err) == [api |-> "Heartbeat", to |-> to, err |-> err]
LeaveReply(err, results) == [api |-> "LeaveGroup", to |-> NoId, err |-> err, results |-> results]
CommitReply(to, err) == [api |-> "OffsetCommit", to |-> to, err |-> err]
PersistOffsets(mid, gen, offs) == [api |-> "PersistOffsets", mid |-> mid, gen |-> gen, offsets |-> offs]
DeleteReply(err) == [api |-> "DeleteGroups", to |-> NoId, err |-> err]
DeleteGroupData == [api |-> "DeleteGroupData"]

IsOrder(e) == e.api \in {"PersistOffsets", "DeleteGroupData"}
IsReply(e) == ~IsOrder(e)

\* The machine returns a step's effects as a sequence, and the adapter carries them out
\* in that order; `out` is their set.  The order is the order of the phases of a step:
\* the orders first (an offset write, a clean-up: the replies they guard come after),
\* then the answers of held-back requests whose members leave (removed, or fenced by a
\* new incarnation), then the held-back SyncGroups a rebalance turns away, then the
\* answers of a completed join phase or of the leader's assignment, then the answer to
\* the step's own request.  (Within a phase the replies answer different requests; their
\* order, the members' order in the Python dict, is not prescribed.)  A sequence of
\* effects is a step's `out` when it holds each effect once, in that order.
Phase(e) ==
    CASE IsOrder(e) -> 0
      [] e.api \in {"JoinGroup", "SyncGroup"} /\ e.err \in {UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID} -> 1
      [] e.api = "SyncGroup" /\ e.err = REBALANCE_IN_PROGRESS -> 2
      [] e.api \in {"JoinGroup", "SyncGroup"} /\ e.err = NONE -> 3
      [] OTHER -> 4
InPhaseOrder(s) == \A i, j \in DOMAIN s : i < j => Phase(s[i]) <= Phase(s[j])
EffectsAre(s, S) == Range(s) = S /\ Len(s) = Cardinality(S) /\ InPhaseOrder(s)

-----------------------------------------------------------------------------
(* Group helpers: functions from a group record to a group record, or to  *)
(* <<group, effects>>, composed the way Kafka's handlers compose them.    *)

Names(protos) == {protos[k][1] : k \in DOMAIN protos}
IsMember(g, m) == m \in DOMAIN g.members
StaticIds(g, i) == {m \in DOMAIN g.members : g.members[m].instance = i}
HasStatic(g, i) == i # NoInstance /\ StaticIds(g, i) # {}
StaticId(g, i) == CHOOSE m \in StaticIds(g, i) : TRUE
Awaiting(g) == {m \in DOMAIN g.members : g.members[m].awaitingJoin}

\* ClassicGroup.supportsProtocols (the protocol type is always "consumer" here)
Supports(g, protos) ==
    IF g.state \in {"Empty", "Absent"} THEN Len(protos) > 0
    ELSE /\ g.protocolType = ProtocolType
         /\ \E n \in Names(protos) : \A m \in DOMAIN g.members : n \in Names(g.members[m].protocols)

\* ClassicGroup.selectProtocol: every member votes for its first preference among
\* the protocols all members support; most votes wins.  KORVET: ties go to the
\* lexicographically smallest name (Kafka: HashMap order).
FirstPreferred(protos, cands) ==
    protos[CHOOSE k \in DOMAIN protos :
               /\ protos[k][1] \in cands
               /\ \A j \in 1..(k - 1) : protos[j][1] \notin cands][1]
NameRank(n) == CHOOSE k \in 1..Len(ProtocolNames) : ProtocolNames[k] = n
SelectProtocol(ms) ==
    LET cands == {n \in Range(ProtocolNames) :
                      \A m \in DOMAIN ms : n \in Names(ms[m].protocols)}
        vote(m) == FirstPreferred(ms[m].protocols, cands)
        voted == {vote(m) : m \in DOMAIN ms}
        votes(n) == Cardinality({m \in DOMAIN ms : vote(m) = n})
        best == {n \in voted : \A o \in voted : votes(o) <= votes(n)}
    IN CHOOSE n \in best : \A o \in best : NameRank(n) <= NameRank(o)

\* ClassicGroupMember.metadata(protocol): the metadata a member sent for a protocol
\* (its first entry of that name; Python: Member.metadata_for).
MetadataFor(protos, name) ==
    IF \E k \in DOMAIN protos : protos[k][1] = name
    THEN protos[CHOOSE k \in DOMAIN protos :
                    protos[k][1] = name /\ \A j \in 1..(k - 1) : protos[j][1] # name][2]
    ELSE NoName

\* The members a leader's JoinGroup reply lists: id, instance id, metadata of `proto`
\* (ClassicGroup.currentClassicGroupMembers; Python: _Draft.current_members).
Listing(ms, proto) ==
    {<<m, ms[m].instance, MetadataFor(ms[m].protocols, proto)>> : m \in DOMAIN ms}

\* ClassicGroup.validateMember
ValidateMember(g, mid, inst) ==
    IF inst # NoInstance
    THEN IF ~HasStatic(g, inst) THEN UNKNOWN_MEMBER_ID
         ELSE IF StaticId(g, inst) # mid THEN FENCED_INSTANCE_ID
         ELSE NONE
    ELSE IF ~IsMember(g, mid) THEN UNKNOWN_MEMBER_ID ELSE NONE

\* ClassicGroup.hasAllMembersJoined
AllJoined(g) == Awaiting(g) = DOMAIN g.members /\ g.pending = {}

\* ClassicGroup.remove, for a set of members.  KORVET: the new leader is the
\* smallest remaining member id (Kafka: HashMap order).
RemoveMembers(g, S) ==
    LET ms == [m \in DOMAIN g.members \ S |-> g.members[m]]
    IN [g EXCEPT !.members = ms,
                 !.leader = IF g.leader \in S
                            THEN IF DOMAIN ms = {} THEN NoId ELSE MinId(DOMAIN ms)
                            ELSE g.leader,
                 !.pending = g.pending \ S,
                 !.pendingSync = g.pendingSync \ S]

\* The answers a member's held-back requests get when it is removed: its
\* JoinGroup gets UNKNOWN_MEMBER_ID with the empty member id (Kafka).  KORVET: a held-back SyncGroup
\* gets UNKNOWN_MEMBER_ID too (Kafka leaves it unanswered).
RemovalReplies(g, m) ==
    (IF g.members[m].awaitingJoin THEN {JoinErrorTo(m, UNKNOWN_MEMBER_ID, NoId)} ELSE {})
    \cup (IF g.members[m].awaitingSync THEN {SyncError(m, UNKNOWN_MEMBER_ID)} ELSE {})

\* GroupMetadataManager.completeClassicGroupJoin: drop dynamic members that did not
\* rejoin, elect a leader among those that did, start the next generation and
\* answer every held-back JoinGroup.
CompleteJoin(g) ==
    LET gone == {m \in DOMAIN g.members :
                     ~g.members[m].awaitingJoin /\ g.members[m].instance = NoInstance}
        g1 == RemoveMembers(g, gone)
        D == DOMAIN g1.members
        joined == Awaiting(g1)
    IN IF D # {} /\ joined = {}
       THEN <<g1, {}>>     \* nobody rejoined: wait for another rebalance timeout
       ELSE IF D = {}
       THEN <<[g1 EXCEPT !.generation = @ + 1, !.protocolName = NoName, !.state = "Empty",
                         !.pendingSync = {}, !.initialRebalance = FALSE], {}>>
       ELSE LET gen == g1.generation + 1
                proto == SelectProtocol(g1.members)
                leader == IF g1.leader \in joined THEN g1.leader ELSE MinId(joined)
                ms == [m \in D |-> [g1.members[m] EXCEPT !.awaitingJoin = FALSE, !.isNew = FALSE]]
                replies == {JoinReply(NONE, m, gen, leader, proto,
                                      IF m = leader THEN Listing(g1.members, proto) ELSE {},
                                      FALSE) : m \in joined}
            IN <<[g1 EXCEPT !.generation = gen, !.protocolName = proto, !.leader = leader,
                            !.members = ms, !.state = "CompletingRebalance", !.pendingSync = D,
                            !.initialRebalance = FALSE], replies>>

\* GroupMetadataManager.prepareRebalance
PrepareRebalance(g) ==
    LET parked == {m \in DOMAIN g.members : g.members[m].awaitingSync}
        \* KORVET: assignments are cleared whenever a rebalance starts (Kafka clears
        \* them only when it leaves CompletingRebalance; it keeps the previous
        \* generation's assignment through a rebalance that starts from Stable).
        ms == [m \in DOMAIN g.members |->
                  [g.members[m] EXCEPT !.assignment = NoAssignment, !.awaitingSync = FALSE]]
        replies == {SyncError(m, REBALANCE_IN_PROGRESS) : m \in parked}
        initial == g.state = "Empty"
        g1 == [g EXCEPT !.members = ms, !.pendingSync = {}, !.state = "PreparingRebalance",
                        !.initialRebalance = initial, !.leaderSync = NoLeaderSync]
    IN IF ~initial /\ AllJoined(g1)
       THEN LET c == CompleteJoin(g1) IN <<c[1], replies \cup c[2]>>
       ELSE <<g1, replies>>

\* GroupMetadataManager.maybeCompleteJoinPhase: never for the initial rebalance,
\* whose delay always runs out (group.initial.rebalance.delay.ms).
MaybeCompleteJoinPhase(g) ==
    IF g.state = "PreparingRebalance" /\ ~g.initialRebalance /\ AllJoined(g)
    THEN CompleteJoin(g) ELSE <<g, {}>>

MaybePrepareRebalanceOrCompleteJoin(g) ==
    IF g.state \in {"Empty", "CompletingRebalance", "Stable"}
    THEN PrepareRebalance(g) ELSE MaybeCompleteJoinPhase(g)

NewMember(inst, protos) ==
    [instance |-> inst, protocols |-> protos, awaitingJoin |-> TRUE, awaitingSync |-> FALSE,
     isNew |-> TRUE, assignment |-> NoAssignment]

\* ClassicGroup.add, then rebalance
AddMemberThenRebalance(g, id, inst, protos) ==
    LET ms == [m \in DOMAIN g.members \cup {id} |->
                  IF m = id THEN NewMember(inst, protos) ELSE g.members[m]]
        g1 == [g EXCEPT !.members = ms,
                        !.protocolType = IF DOMAIN g.members = {} THEN ProtocolType ELSE @,
                        !.leader = IF @ = NoId THEN id ELSE @,
                        !.pending = @ \ {id}]
    IN MaybePrepareRebalanceOrCompleteJoin(g1)

UpdateMemberThenRebalance(g, mid, protos) ==
    MaybePrepareRebalanceOrCompleteJoin(
        [g EXCEPT !.members[mid].protocols = protos, !.members[mid].awaitingJoin = TRUE])

ReKey(f, old, new) ==
    IF old \in DOMAIN f
    THEN [m \in (DOMAIN f \ {old}) \cup {new} |-> IF m = new THEN f[old] ELSE f[m]]
    ELSE f

\* GroupMetadataManager.updateStaticMemberThenRebalanceOrCompleteJoin: a static
\* member rejoins with an unknown member id; the old id is fenced.
ReplaceStaticMember(g, old, new, protos, skipOk) ==
    LET om == g.members[old]
        fenced == (IF om.awaitingJoin THEN {JoinError(FENCED_INSTANCE_ID, old)} ELSE {})
                  \cup (IF om.awaitingSync THEN {SyncError(old, FENCED_INSTANCE_ID)} ELSE {})
        nm == [instance |-> om.instance, protocols |-> protos, awaitingJoin |-> TRUE,
               awaitingSync |-> FALSE, isNew |-> FALSE, assignment |-> om.assignment]
        ms == [m \in (DOMAIN g.members \ {old}) \cup {new} |->
                  IF m = new THEN nm ELSE g.members[m]]
        \* KORVET: the pending-sync entry and the leader's assignment move to the new id
        \* (Kafka keeps the old id pending, which costs a needless rebalance later).
        g1 == [g EXCEPT !.members = ms,
                        !.leader = IF @ = old THEN new ELSE @,
                        !.pendingSync = IF old \in @ THEN (@ \ {old}) \cup {new} ELSE @,
                        !.leaderSync.asg = ReKey(@, old, new)]
    IN IF g.state = "Stable" /\ SelectProtocol(g1.members) = g.protocolName
       THEN \* no rebalance: answer at once with the current generation
            LET isLeader == g1.leader = new
                reply == IF skipOk   \* JoinGroup v9+ (KIP-814)
                         THEN JoinReply(NONE, new, g.generation, g1.leader, g.protocolName,
                                        IF isLeader THEN Listing(ms, g.protocolName) ELSE {},
                                        isLeader)
                         ELSE JoinReply(NONE, new, g.generation, g.leader, g.protocolName,
                                        {}, FALSE)
            IN <<[g1 EXCEPT !.members[new].awaitingJoin = FALSE], fenced \cup {reply}>>
       ELSE LET r == IF g.state = "PreparingRebalance"
                     THEN MaybeCompleteJoinPhase(g1)
                     ELSE PrepareRebalance(g1)
            IN <<r[1], fenced \cup r[2]>>

\* GroupMetadataManager.acceptJoiningMember (group.max.size)
AcceptJoining(g, mid) ==
    CASE g.state = "PreparingRebalance" ->
             (IsMember(g, mid) /\ g.members[mid].awaitingJoin)
             \/ Cardinality(Awaiting(g)) < GroupMaxSize
      [] g.state \in {"CompletingRebalance", "Stable"} ->
             IsMember(g, mid) \/ Cardinality(DOMAIN g.members) < GroupMaxSize
      [] OTHER -> TRUE

-----------------------------------------------------------------------------
(* The requests.  Each action is named after the Python event it models. *)

\* The outcome of a JoinGroup as <<group, effects, a fresh id was used>>.
JoinNewMember(g, inst, protos, requireKnown, skipOk) ==
    IF g.state = "Dead" THEN <<g, {JoinError(COORDINATOR_NOT_AVAILABLE, NoId)}, FALSE>>
    ELSE IF ~Supports(g, protos) THEN <<g, {JoinError(INCONSISTENT_GROUP_PROTOCOL, NoId)}, FALSE>>
    ELSE IF HasStatic(g, inst)
    THEN LET r == ReplaceStaticMember(g, StaticId(g, inst), FreshId, protos, skipOk)
         IN <<r[1], r[2], TRUE>>
    ELSE IF inst = NoInstance /\ requireKnown    \* JoinGroup v4+ (KIP-394)
    THEN <<[g EXCEPT !.pending = @ \cup {FreshId}], {JoinError(MEMBER_ID_REQUIRED, FreshId)}, TRUE>>
    ELSE LET r == AddMemberThenRebalance(g, FreshId, inst, protos) IN <<r[1], r[2], TRUE>>

JoinExistingMember(g, mid, inst, protos) ==
    IF g.state = "Dead" THEN <<g, {JoinError(COORDINATOR_NOT_AVAILABLE, mid)}, FALSE>>
    ELSE IF ~Supports(g, protos) THEN <<g, {JoinError(INCONSISTENT_GROUP_PROTOCOL, mid)}, FALSE>>
    ELSE IF mid \in g.pending /\ inst = NoInstance
    THEN LET r == AddMemberThenRebalance(g, mid, NoInstance, protos) IN <<r[1], r[2], FALSE>>
    ELSE LET err == ValidateMember(g, mid, inst)
         IN IF err # NONE THEN <<g, {JoinError(err, mid)}, FALSE>>
            ELSE LET same == g.members[mid].protocols = protos
                     current == JoinReply(NONE, mid, g.generation, g.leader, g.protocolName,
                                          IF g.leader = mid THEN Listing(g.members, g.protocolName)
                                          ELSE {}, FALSE)
                     update == UpdateMemberThenRebalance(g, mid, protos)
                 IN CASE g.state = "PreparingRebalance" -> <<update[1], update[2], FALSE>>
                      [] g.state = "CompletingRebalance" ->
                             IF same THEN <<g, {current}, FALSE>>
                             ELSE <<update[1], update[2], FALSE>>
                      [] g.state = "Stable" ->
                             IF g.leader = mid \/ ~same
                             THEN <<update[1], update[2], FALSE>>
                             ELSE <<g, {current}, FALSE>>
                      [] OTHER -> <<g, {JoinError(UNKNOWN_MEMBER_ID, mid)}, FALSE>>

JoinOutcome(mid, inst, protos, sessionOk, requireKnown, skipOk) ==
    IF ~sessionOk THEN <<grp, {JoinError(INVALID_SESSION_TIMEOUT, mid)}, FALSE>>
    ELSE IF grp.state = "Absent" /\ mid # NoId THEN <<grp, {JoinError(UNKNOWN_MEMBER_ID, mid)}, FALSE>>
    ELSE LET g == IF grp.state = "Absent" THEN NewGroup ELSE grp
         IN IF ~AcceptJoining(g, mid)
            THEN <<RemoveMembers(g, {mid}), {JoinErrorTo(mid, GROUP_MAX_SIZE_REACHED, NoId)}, FALSE>>
            ELSE IF mid = NoId THEN JoinNewMember(g, inst, protos, requireKnown, skipOk)
            ELSE JoinExistingMember(g, mid, inst, protos)

JoinGroupReq(mid, inst, protos, sessionOk, requireKnown, skipOk) ==
    /\ mid = NoId => CanIssue
    /\ LET r == JoinOutcome(mid, inst, protos, sessionOk, requireKnown, skipOk)
       IN /\ grp' = r[1]
          /\ out' = r[2]
          /\ issued' = IF r[3] THEN issued + 1 ELSE issued
          /\ UNCHANGED <<calm, floor>>

\* SyncGroup; `asg` is the leader's assignment (a function from member ids),
\* `pname` the protocol name of v5+ ("" when not sent).
SyncOutcome(mid, inst, gen, asg, pname) ==
    IF grp.state \in {"Absent", "Empty"} THEN <<grp, {SyncError(mid, UNKNOWN_MEMBER_ID)}>>
    ELSE IF grp.state = "Dead" THEN <<grp, {SyncError(mid, COORDINATOR_NOT_AVAILABLE)}>>
    ELSE IF ValidateMember(grp, mid, inst) # NONE
    THEN <<grp, {SyncError(mid, ValidateMember(grp, mid, inst))}>>
    ELSE IF gen # grp.generation THEN <<grp, {SyncError(mid, ILLEGAL_GENERATION)}>>
    ELSE IF pname # NoName /\ grp.protocolName # NoName /\ pname # grp.protocolName
    THEN <<grp, {SyncError(mid, INCONSISTENT_GROUP_PROTOCOL)}>>
    ELSE IF grp.state = "PreparingRebalance" THEN <<grp, {SyncError(mid, REBALANCE_IN_PROGRESS)}>>
    ELSE IF grp.state = "Stable"
    THEN <<[grp EXCEPT !.pendingSync = @ \ {mid}],
           {SyncReply(mid, NONE, grp.protocolName, grp.members[mid].assignment)}>>
    ELSE \* CompletingRebalance: hold the request back until the leader's assignment
         LET g1 == [grp EXCEPT !.members[mid].awaitingSync = TRUE, !.pendingSync = @ \ {mid}]
         IN IF grp.leader # mid THEN <<g1, {}>>
            ELSE LET D == DOMAIN g1.members
                     full == [m \in D |-> IF m \in DOMAIN asg THEN asg[m] ELSE NoAssignment]
                     parked == {m \in D : g1.members[m].awaitingSync}
                     ms == [m \in D |-> [g1.members[m] EXCEPT !.assignment = full[m],
                                                             !.awaitingSync = FALSE]]
                 IN <<[g1 EXCEPT !.members = ms, !.state = "Stable",
                                 !.leaderSync = [gen |-> grp.generation, asg |-> full]],
                      {SyncReply(m, NONE, grp.protocolName, full[m]) : m \in parked}>>

SyncGroupReq(mid, inst, gen, asg, pname) ==
    LET r == SyncOutcome(mid, inst, gen, asg, pname)
    IN grp' = r[1] /\ out' = r[2] /\ UNCHANGED <<issued, calm, floor>>

HeartbeatError(mid, inst, gen) ==
    IF grp.state = "Absent" THEN UNKNOWN_MEMBER_ID
    ELSE IF grp.state = "Dead" THEN COORDINATOR_NOT_AVAILABLE
    ELSE IF ValidateMember(grp, mid, inst) # NONE THEN ValidateMember(grp, mid, inst)
    ELSE IF gen # grp.generation THEN ILLEGAL_GENERATION
    ELSE IF grp.state = "PreparingRebalance" THEN REBALANCE_IN_PROGRESS
    ELSE NONE

HeartbeatReq(mid, inst, gen) ==
    /\ out' = {HeartbeatReply(mid, HeartbeatError(mid, inst, gen))}
    /\ UNCHANGED <<grp, issued, calm, floor>>

\* One member of a LeaveGroup batch: <<group, error, effects>>.
LeaveOne(g, mid, inst) ==
    IF mid = NoId
    THEN IF HasStatic(g, inst)   \* admin removal of a static member by instance id
         THEN LET m == StaticId(g, inst) IN <<RemoveMembers(g, {m}), NONE, RemovalReplies(g, m)>>
         ELSE <<g, UNKNOWN_MEMBER_ID, {}>>
    ELSE IF mid \in g.pending THEN <<[g EXCEPT !.pending = @ \ {mid}], NONE, {}>>
    ELSE IF ValidateMember(g, mid, inst) # NONE THEN <<g, ValidateMember(g, mid, inst), {}>>
    ELSE <<RemoveMembers(g, {mid}), NONE, RemovalReplies(g, mid)>>

RECURSIVE LeaveAll(_, _, _, _, _)
\* acc: effects so far; res: the per-member results so far
LeaveAll(g, batch, i, acc, res) ==
    IF i > Len(batch) THEN <<g, acc, res>>
    ELSE LET r == LeaveOne(g, batch[i][1], batch[i][2])
         IN LeaveAll(r[1], batch, i + 1, acc \cup r[3],
                     Append(res, [mid |-> batch[i][1], inst |-> batch[i][2], err |-> r[2]]))

LeaveOutcome(batch) ==
    IF grp.state = "Absent"
    THEN <<grp, {LeaveReply(NONE, [k \in DOMAIN batch |->
                     [mid |-> batch[k][1], inst |-> batch[k][2], err |-> UNKNOWN_MEMBER_ID]])}>>
    ELSE IF grp.state = "Dead" THEN <<grp, {LeaveReply(COORDINATOR_NOT_AVAILABLE, <<>>)}>>
    ELSE LET r == LeaveAll(grp, batch, 1, {}, <<>>)
             left == \E k \in DOMAIN r[3] : r[3][k].err = NONE
             g1 == r[1]
             next == IF ~left THEN <<g1, {}>>
                     ELSE IF g1.state \in {"Stable", "CompletingRebalance"}
                     THEN MaybePrepareRebalanceOrCompleteJoin(g1)
                     ELSE MaybeCompleteJoinPhase(g1)
         IN <<next[1], r[2] \cup next[2] \cup {LeaveReply(NONE, r[3])}>>

LeaveGroupReq(batch) ==
    LET r == LeaveOutcome(batch)
    IN grp' = r[1] /\ out' = r[2] /\ UNCHANGED <<issued, calm, floor>>

\* OffsetCommit; `offs` maps partitions to offsets; `v9` is OffsetCommit v9+,
\* which answers GROUP_ID_NOT_FOUND rather than ILLEGAL_GENERATION for an
\* unknown group.
Store(g, mid, gen, offs) ==
    <<[g EXCEPT !.committed = [p \in Partitions |-> IF p \in DOMAIN offs THEN offs[p] ELSE @[p]]],
      {PersistOffsets(mid, gen, offs), CommitReply(mid, NONE)}>>

CommitOutcome(mid, inst, gen, offs, v9) ==
    IF grp.state = "Absent"
    THEN IF gen < 0 THEN Store(NewGroup, mid, gen, offs)   \* a "simple" group
         ELSE <<grp, {CommitReply(mid, IF v9 THEN GROUP_ID_NOT_FOUND ELSE ILLEGAL_GENERATION)}>>
    ELSE IF grp.state = "Dead" THEN <<grp, {CommitReply(mid, COORDINATOR_NOT_AVAILABLE)}>>
    ELSE IF gen < 0 /\ grp.state = "Empty" THEN Store(grp, mid, gen, offs)
    ELSE IF gen >= 0 \/ mid # NoId \/ inst # NoInstance
    THEN IF ValidateMember(grp, mid, inst) # NONE
         THEN <<grp, {CommitReply(mid, ValidateMember(grp, mid, inst))}>>
         ELSE IF gen # grp.generation THEN <<grp, {CommitReply(mid, ILLEGAL_GENERATION)}>>
         ELSE IF grp.state = "CompletingRebalance"
         THEN <<grp, {CommitReply(mid, REBALANCE_IN_PROGRESS)}>>
         ELSE Store(grp, mid, gen, offs)
    ELSE <<grp, {CommitReply(mid, UNKNOWN_MEMBER_ID)}>>

OffsetCommitReq(mid, inst, gen, offs, v9) ==
    LET r == CommitOutcome(mid, inst, gen, offs, v9)
    IN grp' = r[1] /\ out' = r[2] /\ UNCHANGED <<issued, calm, floor>>

\* DeleteGroups for this group.  KORVET: the group stays Dead until the adapter
\* has deleted its data in Redis (GroupDataDeleted); meanwhile requests get
\* COORDINATOR_NOT_AVAILABLE, as Kafka answers for a Dead group object.
DeleteGroups ==
    /\ IF grp.state \in {"Absent", "Dead"}
       THEN out' = {DeleteReply(GROUP_ID_NOT_FOUND)} /\ UNCHANGED grp
       ELSE IF grp.state = "Empty"
       THEN /\ grp' = [AbsentGroup EXCEPT !.state = "Dead"]
            /\ out' = {DeleteReply(NONE), DeleteGroupData}
       ELSE out' = {DeleteReply(NON_EMPTY_GROUP)} /\ UNCHANGED grp
    /\ UNCHANGED <<issued, calm, floor>>

\* The adapter has deleted the group's committed offsets and Redis consumer groups.
GroupDataDeleted ==
    /\ grp.state = "Dead"
    /\ grp' = AbsentGroup
    /\ out' = {}
    /\ UNCHANGED <<issued, calm, floor>>

-----------------------------------------------------------------------------
(* Timers: each is enabled whenever its deadline is armed (time is abstract). *)

\* ClassicGroupMember.hasSatisfiedHeartbeat
HeartbeatSatisfied(m) ==
    ~grp.members[m].isNew /\ (grp.members[m].awaitingJoin \/ grp.members[m].awaitingSync)

\* The session (or, for a new member still waiting in JoinGroup, the 5 minute
\* new-member join timeout) of member m runs out.
SessionTimeoutOf(m) ==
    /\ IsMember(grp, m)
    /\ ~HeartbeatSatisfied(m)
    /\ LET g1 == RemoveMembers(grp, {m})
           r == IF grp.state \in {"Stable", "CompletingRebalance"} THEN PrepareRebalance(g1)
                ELSE IF grp.state = "PreparingRebalance" /\ AllJoined(g1) THEN CompleteJoin(g1)
                ELSE <<g1, {}>>
       IN grp' = r[1] /\ out' = RemovalReplies(grp, m) \cup r[2]
    /\ UNCHANGED <<issued, calm, floor>>

\* A member id handed out with MEMBER_ID_REQUIRED was not used in time.
PendingMemberTimeoutOf(m) ==
    /\ m \in grp.pending
    /\ LET g1 == [grp EXCEPT !.pending = @ \ {m}]
           r == IF g1.state = "PreparingRebalance" /\ AllJoined(g1) THEN CompleteJoin(g1)
                ELSE <<g1, {}>>
       IN grp' = r[1] /\ out' = r[2]
    /\ UNCHANGED <<issued, calm, floor>>

\* The join phase's deadline: the rebalance timeout, or for a group that was
\* Empty the initial rebalance delay.
RebalanceTimeout ==
    /\ grp.state = "PreparingRebalance"
    /\ LET r == CompleteJoin(grp)
       IN /\ r # <<grp, {}>>    \* otherwise the timer is simply re-armed
          /\ grp' = r[1]
          /\ out' = r[2]
    /\ UNCHANGED <<issued, calm, floor>>

\* Members that did not send SyncGroup within the rebalance timeout are removed.
PendingSyncTimeout ==
    /\ grp.state \in {"CompletingRebalance", "Stable"}
    /\ grp.pendingSync # {}
    /\ LET r == PrepareRebalance(RemoveMembers(grp, grp.pendingSync))
       IN grp' = r[1] /\ out' = r[2]
    /\ UNCHANGED <<issued, calm, floor>>

\* What a snapshot keeps of a group: everything but the held-back requests, whose
\* connections die with the broker (the Python snapshot's transient fields).
Snapshot(g) ==
    IF g.state \in {"Absent", "Dead"} THEN g
    ELSE [g EXCEPT !.members = [m \in DOMAIN @ |->
              [@[m] EXCEPT !.awaitingJoin = FALSE, !.awaitingSync = FALSE]]]

\* The broker restarts from the snapshot of the state: the group survives,
\* held-back requests die with their connections, timers are re-armed, and
\* the clean-up of a Dead group is ordered again.  (In this module the snapshot
\* is the current state; GroupCoordinatorDurable restarts from what Redis holds.)
Restart ==
    /\ grp' = Snapshot(grp)
    /\ out' = IF grp.state = "Dead" THEN {DeleteGroupData} ELSE {}
    /\ UNCHANGED <<issued, calm, floor>>

-----------------------------------------------------------------------------
(* Request parameters: every value a client may send that can make a      *)
(* difference, and one representative of each class of values that the    *)
(* coordinator treats alike: any generation other than the current one is  *)
(* stale (the one before it, or 1 while the group is at 0), any protocol   *)
(* name other than the group's is a mismatch.                             *)

StaleGen == IF grp.generation > 0 THEN grp.generation - 1 ELSE 1
Gens == {grp.generation, StaleGen}
SyncNames == {NoName} \cup {CHOOSE n \in Range(ProtocolNames) : n # grp.protocolName}
Instances == {NoInstance} \cup InstanceIds
AssignmentMaps ==
    UNION {[S -> Assignments] : S \in SUBSET DOMAIN grp.members}
\* An operator with an argument, not a constant definition: TLC evaluates every constant
\* definition whole before the first state, and in trace validation (which never commits
\* nondeterministically) Offsets is every offset label of a log, so that evaluation alone
\* took 20 s and more per log.  Used as OffsetMapsOf(Partitions).
OffsetMapsOf(P) == UNION {[S -> Offsets] : S \in (SUBSET P) \ {{}}}
LeaveMembers == ({NoId} \cup KnownIds) \X Instances
LeaveBatches == UNION {[1..n -> LeaveMembers] : n \in 1..LeaveBatchMax}

\* JoinGroup variants: a new member (member id "") as a dynamic member with v3
\* (no MEMBER_ID_REQUIRED) or v4+, or a static member with v5-v8 or v9+
\* (skipAssignment); a known member id, with or without an instance id.  The
\* version makes no other difference.
JoinVariants(mid) ==
    IF mid = NoId
    THEN {[inst |-> NoInstance, requireKnown |-> rk, skipOk |-> FALSE] : rk \in BOOLEAN}
         \cup {[inst |-> i, requireKnown |-> TRUE, skipOk |-> sk] : i \in InstanceIds, sk \in BOOLEAN}
    ELSE {[inst |-> i, requireKnown |-> TRUE, skipOk |-> FALSE] : i \in Instances}

\* The actions of Next, one per Python event class.  (Each begins with a choice
\* over a set that depends on the state, which makes TLC name its transitions
\* after it.)
JoinGroup ==
    \E mid \in {NoId} \cup KnownIds :
        \/ \E v \in JoinVariants(mid), p \in ProtocolChoices :
               JoinGroupReq(mid, v.inst, p, TRUE, v.requireKnown, v.skipOk)
        \/ \* a session timeout outside the broker's bounds
           JoinGroupReq(mid, NoInstance, CHOOSE p \in ProtocolChoices : TRUE, FALSE, TRUE, FALSE)

SyncGroup ==
    \E mid \in KnownIds, i \in Instances, gen \in Gens, pname \in SyncNames :
        \E asg \in IF mid = grp.leader /\ gen = grp.generation /\ grp.state = "CompletingRebalance"
                   THEN AssignmentMaps ELSE {EmptyFcn} :
            SyncGroupReq(mid, i, gen, asg, pname)

Heartbeat == \E mid \in KnownIds, i \in Instances, gen \in Gens : HeartbeatReq(mid, i, gen)

LeaveGroup == \E batch \in LeaveBatches : LeaveGroupReq(batch)

OffsetCommit ==
    \E mid \in {NoId} \cup KnownIds, i \in Instances, gen \in {-1} \cup Gens,
       offs \in OffsetMapsOf(Partitions) :
        \E v9 \in IF grp.state = "Absent" /\ gen >= 0 THEN BOOLEAN ELSE {FALSE} :
            OffsetCommitReq(mid, i, gen, offs, v9)

SessionTimeout == \E m \in DOMAIN grp.members : SessionTimeoutOf(m)

PendingMemberTimeout == \E m \in grp.pending : PendingMemberTimeoutOf(m)

Next ==
    \/ JoinGroup
    \/ SyncGroup
    \/ Heartbeat
    \/ LeaveGroup
    \/ OffsetCommit
    \/ DeleteGroups
    \/ GroupDataDeleted
    \/ SessionTimeout
    \/ PendingMemberTimeout
    \/ RebalanceTimeout
    \/ PendingSyncTimeout
    \/ Restart

Init == grp = AbsentGroup /\ out = {} /\ issued = 0 /\ calm = FALSE /\ floor = 0

Spec == Init /\ [][Next]_vars

StateConstraint == grp.generation <= MaxGeneration

-----------------------------------------------------------------------------
(* Invariants *)

MemberRecords ==
    [instance: Instances, protocols: ProtocolChoices, awaitingJoin: BOOLEAN,
     awaitingSync: BOOLEAN, isNew: BOOLEAN, assignment: {NoAssignment} \cup Assignments]

TypeOK ==
    /\ grp.state \in States
    /\ grp.generation \in Nat
    /\ grp.protocolType \in {NoName, ProtocolType}
    /\ grp.protocolName \in {NoName} \cup Range(ProtocolNames)
    /\ grp.leader \in {NoId} \cup Range(MemberIds)
    /\ DOMAIN grp.members \subseteq Range(MemberIds)
    /\ \A m \in DOMAIN grp.members : grp.members[m] \in MemberRecords
    /\ grp.pending \subseteq Range(MemberIds)
    /\ grp.pendingSync \subseteq Range(MemberIds)
    /\ grp.initialRebalance \in BOOLEAN
    /\ grp.committed \in [Partitions -> {-1} \cup Offsets]
    /\ issued \in 0..Len(MemberIds)

\* The leader is a member; a group with members has a leader.
LeaderIsMember ==
    /\ grp.leader # NoId => IsMember(grp, grp.leader)
    /\ DOMAIN grp.members # {} => grp.leader # NoId

\* An instance id maps to at most one live member.
InstanceIdUnique ==
    \A m1, m2 \in DOMAIN grp.members :
        (m1 # m2 /\ grp.members[m1].instance # NoInstance)
            => grp.members[m1].instance # grp.members[m2].instance

\* In Stable every member holds the assignment the leader sent for the current
\* generation.
StableAssignmentFromLeader ==
    grp.state = "Stable" =>
        /\ grp.leaderSync.gen = grp.generation
        /\ DOMAIN grp.leaderSync.asg = DOMAIN grp.members
        /\ \A m \in DOMAIN grp.members : grp.members[m].assignment = grp.leaderSync.asg[m]

\* Every successful SyncGroup answer carries that assignment.
SyncRepliesCarryLeaderAssignment ==
    \A e \in out : (e.api = "SyncGroup" /\ e.err = NONE) =>
        /\ grp.state = "Stable"
        /\ e.asg = grp.leaderSync.asg[e.to]
        /\ e.proto = grp.protocolName

\* A commit carrying a stale generation (or from a non-member) is never stored:
\* an offset write is ordered only for the current generation of a member, or
\* for generation -1 on an Empty group.
StaleCommitNeverStored ==
    \A e \in out : e.api = "PersistOffsets" =>
        \/ /\ e.gen = grp.generation
           /\ IsMember(grp, e.mid)
           /\ grp.state \in {"Stable", "PreparingRebalance"}
        \/ e.gen < 0 /\ grp.state = "Empty"

\* Held-back requests exist only in the phase that holds them back.
ParkedOnlyWhileRebalancing ==
    \A m \in DOMAIN grp.members :
        /\ grp.members[m].awaitingJoin => grp.state = "PreparingRebalance"
        /\ grp.members[m].awaitingSync => grp.state = "CompletingRebalance"

\* The bookkeeping sets are consistent with the members.
MembershipConsistent ==
    /\ grp.pending \cap DOMAIN grp.members = {}
    /\ grp.pendingSync \subseteq DOMAIN grp.members
    /\ grp.pendingSync # {} => grp.state \in {"CompletingRebalance", "Stable"}
    /\ grp.state \in {"Absent", "Empty", "Dead"} => DOMAIN grp.members = {}
    /\ grp.state \in {"CompletingRebalance", "Stable"} => DOMAIN grp.members # {}
    /\ grp.state \in {"Absent", "Dead"} => grp = [AbsentGroup EXCEPT !.state = grp.state]
    /\ grp.initialRebalance => grp.state = "PreparingRebalance"

\* Outside a rebalance every member supports the selected protocol.
ProtocolAgreed ==
    grp.state \in {"CompletingRebalance", "Stable"} =>
        /\ grp.protocolName # NoName
        /\ \A m \in DOMAIN grp.members : grp.protocolName \in Names(grp.members[m].protocols)

\* A member id is never handed out twice (ids are the adapter's UUIDs): every member
\* and pending id was handed out, and the id the broker hands out next is in no use.
\* (Ids come from FreshId and the ids handed out only, so the first conjunct holds as
\* long as `issued` counts what was handed out; a broker that hands out an id without
\* counting it, the mutant GroupCoordinator-mutant-MemberIdsFresh, breaks both.  In trace
\* validation the ids are the logged ones: a reused id is caught here.)
MemberIdsFresh ==
    /\ DOMAIN grp.members \cup grp.pending \subseteq KnownIds
    /\ CanIssue => FreshId \notin DOMAIN grp.members \cup grp.pending

\* The invariants over `out`, as properties of every transition: checked on each step
\* TLC takes, also into a state it has seen before (the models tell states apart
\* without `out`, see CoreView).
\*
\* An offset write is ordered only for a commit the group accepts, judged by the group
\* the commit met (the state before the step): a member's commit of the generation the
\* group is in, while it is Stable or PreparingRebalance (the previous generation's
\* commits while it rebalances), or a commit without a generation to a group without
\* members; and the offsets written are the ones the group then holds (what a reader of
\* the group, OffsetFetch, is told).  StaleCommitNeverStored says the first part of the
\* state after the step (Python's invariant); this says it of the state the commit was
\* checked against, and ties the write to the stored offsets.
CommitAccepted(e) ==
    /\ \/ /\ e.gen = grp.generation /\ IsMember(grp, e.mid)
          /\ grp.state \in {"Stable", "PreparingRebalance"}
       \/ e.gen < 0 /\ grp.state \in {"Absent", "Empty"}
    /\ \A p \in DOMAIN e.offsets : grp'.committed[p] = e.offsets[p]
CommitsAccepted == [][\A e \in out' : e.api = "PersistOffsets" => CommitAccepted(e)]_vars
SyncRepliesFromLeader == [][SyncRepliesCarryLeaderAssignment']_vars
OutputsCorrect == CommitsAccepted /\ SyncRepliesFromLeader

-----------------------------------------------------------------------------
(* Properties *)

\* The generation only moves forward, by one, when a join phase completes;
\* within a group's life it is never reused.
GenerationIncreases ==
    [][grp.state # "Absent" /\ grp'.state \notin {"Absent", "Dead"} =>
           \/ grp'.generation = grp.generation
           \/ /\ grp'.generation = grp.generation + 1
              /\ grp'.state \in {"CompletingRebalance", "Empty"}]_vars

\* Liveness, with a clock for every timer: GroupCoordinatorLive.tla.

-----------------------------------------------------------------------------
(* Values for the models (TLC's .cfg files cannot spell sequences; they    *)
(* bind the constants to these with `<-`).                                *)

Ids2 == <<"m1", "m2">>
Ids3 == <<"m1", "m2", "m3">>
Ids4 == <<"m1", "m2", "m3", "m4">>
\* One protocol with two metadata values (a metadata change) and a second
\* protocol no member shares with it (INCONSISTENT_GROUP_PROTOCOL).
ProtocolsBasic == {<<<<"range", "a">>>>, <<<<"range", "b">>>>, <<<<"rr", "a">>>>}
\* Two protocols, no metadata change (the durable models: a generation re-issued
\* after a loss may select the other one).
ProtocolsTwo == {<<<<"range", "a">>>>, <<<<"rr", "a">>>>}
\* Just a metadata change.
ProtocolsMeta == {<<<<"range", "a">>>>, <<<<"range", "b">>>>}
\* The same plus a member that prefers rr but also speaks range (the vote).
ProtocolsVote == ProtocolsBasic \cup {<<<<"rr", "a">>, <<"range", "a">>>>}
Names2 == <<"range", "rr">>

\* What tells two states apart in the models: the effects of the step that
\* reached a state (`out`) are not part of it.
CoreView == <<grp, issued>>

=============================================================================
