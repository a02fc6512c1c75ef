------------------------- MODULE GroupCoordinatorSteps -------------------------
(***************************************************************************)
(* Every step of GroupCoordinator, with its event, compared with the       *)
(* Python machine's step by TLC: one transition per (state, event).        *)
(*                                                                         *)
(* StepNext is Next with the event of each step recorded in `ev` (the      *)
(* action's name and every parameter), so that a step is a function of     *)
(* (state, ev): the same quantifiers over the same parameter domains as    *)
(* Next's actions (tests/spec/GroupCoordinator/test_coordinator_replay.py checks that *)
(* both have the same successors in every state).                          *)
(*                                                                         *)
(* The check (tests/spec/GroupCoordinator/test_coordinator_replay.py): TLC explores   *)
(* the replay model (GroupCoordinatorReplay.cfg); for every state of its   *)
(* graph the test steps the Python machine with every event of the        *)
(* spec's parameter domains and writes what it did into a generated root   *)
(* module, which passes these tables to CheckInit and Agrees.  TLC then   *)
(* starts from every state of the graph, takes every enabled step of       *)
(* StepNext once                                                           *)
(* (depth 1) and checks Agrees on each: the machine, given the same event *)
(* in the same state, reached the same next state AND produced the same   *)
(* effects (replies, released held-back replies, offset writes, clean-up  *)
(* orders).  Steps that leave the state unchanged (heartbeats, error       *)
(* replies) are steps like any other here.  The test also requires the    *)
(* number of TLC's steps to equal the number of the machine's, so neither *)
(* side has a step the other lacks.  On a violation the test prints the   *)
(* machine's step next to TLC's.                                           *)
(***************************************************************************)
EXTENDS GroupCoordinator

VARIABLES
    ev,     \* the event of the last step: [api |-> action name, <parameters>]
    src,    \* the index (in the table of states) of the state the step started from
    depth   \* 0 in the initial states, 1 after the one step

stepVars == <<vars, ev, src, depth>>

NoEvent == [api |-> ""]

JoinEv(mid, inst, protos, sessionOk, requireKnown, skipOk) ==
    [api |-> "JoinGroup", mid |-> mid, inst |-> inst, protos |-> protos,
     sessionOk |-> sessionOk, requireKnown |-> requireKnown, skipOk |-> skipOk]
SyncEv(mid, inst, gen, asg, pname) ==
    [api |-> "SyncGroup", mid |-> mid, inst |-> inst, gen |-> gen, asg |-> asg, pname |-> pname]
HeartbeatEv(mid, inst, gen) == [api |-> "Heartbeat", mid |-> mid, inst |-> inst, gen |-> gen]
LeaveEv(batch) == [api |-> "LeaveGroup", batch |-> batch]
CommitEv(mid, inst, gen, offs, v9) ==
    [api |-> "OffsetCommit", mid |-> mid, inst |-> inst, gen |-> gen, offs |-> offs, v9 |-> v9]
MemberEv(api, mid) == [api |-> api, mid |-> mid]
PlainEv(api) == [api |-> api]

\* Next's actions, quantifier by quantifier, recording the event.
StepNext ==
    \/ \E mid \in {NoId} \cup KnownIds :
           \/ \E v \in JoinVariants(mid), p \in ProtocolChoices :
                  /\ JoinGroupReq(mid, v.inst, p, TRUE, v.requireKnown, v.skipOk)
                  /\ ev' = JoinEv(mid, v.inst, p, TRUE, v.requireKnown, v.skipOk)
           \/ LET p == CHOOSE p \in ProtocolChoices : TRUE
              IN /\ JoinGroupReq(mid, NoInstance, p, FALSE, TRUE, FALSE)
                 /\ ev' = JoinEv(mid, NoInstance, p, FALSE, TRUE, FALSE)
    \/ \E mid \in KnownIds, i \in Instances, gen \in Gens, pname \in SyncNames :
           \E asg \in IF mid = grp.leader /\ gen = grp.generation
                         /\ grp.state = "CompletingRebalance"
                      THEN AssignmentMaps ELSE {EmptyFcn} :
               SyncGroupReq(mid, i, gen, asg, pname) /\ ev' = SyncEv(mid, i, gen, asg, pname)
    \/ \E mid \in KnownIds, i \in Instances, gen \in Gens :
           HeartbeatReq(mid, i, gen) /\ ev' = HeartbeatEv(mid, i, gen)
    \/ \E batch \in LeaveBatches : LeaveGroupReq(batch) /\ ev' = LeaveEv(batch)
    \/ \E mid \in {NoId} \cup KnownIds, i \in Instances, gen \in {-1} \cup Gens,
          offs \in OffsetMapsOf(Partitions) :
           \E v9 \in IF grp.state = "Absent" /\ gen >= 0 THEN BOOLEAN ELSE {FALSE} :
               OffsetCommitReq(mid, i, gen, offs, v9) /\ ev' = CommitEv(mid, i, gen, offs, v9)
    \/ DeleteGroups /\ ev' = PlainEv("DeleteGroups")
    \/ GroupDataDeleted /\ ev' = PlainEv("GroupDataDeleted")
    \/ \E m \in DOMAIN grp.members : SessionTimeoutOf(m) /\ ev' = MemberEv("SessionTimeout", m)
    \/ \E m \in grp.pending :
           PendingMemberTimeoutOf(m) /\ ev' = MemberEv("PendingMemberTimeout", m)
    \/ RebalanceTimeout /\ ev' = PlainEv("RebalanceTimeout")
    \/ PendingSyncTimeout /\ ev' = PlainEv("PendingSyncTimeout")
    \/ Restart /\ ev' = PlainEv("Restart")

-----------------------------------------------------------------------------
(* The depth-1 check *)

\* The tables the test generates (the root module passes them in, as
\* arguments, so that TLC evaluates each once):
\*   S: <<<<grp, issued>>, ...>>, the states to start from (the graph's) and the states
\*      beyond the model's bounds that the machine reached;  n: how many to start from;
\*   E: <<ev, ...>>, every event the machine was given;
\*   O: <<effects, ...>>, every sequence of effects it produced (in its order);
\*   T: T[s] = <<<<event index, next state index, effects index>>, ...>>, its steps from S[s].
CheckInit(S, n) ==
    /\ src \in 1..n
    /\ grp = S[src][1]
    /\ issued = S[src][2]
    /\ out = {}
    /\ calm = FALSE
    /\ floor = 0
    /\ ev = NoEvent
    /\ depth = 0

CheckNext == depth = 0 /\ StepNext /\ depth' = 1 /\ UNCHANGED src

\* The machine's step for this state and event: <<>> if it has none.
MachineStep(E, T) ==
    LET es == T[src]
        hits == {i \in DOMAIN es : E[es[i][1]] = ev}
    IN IF hits = {} THEN <<>> ELSE es[CHOOSE i \in hits : TRUE]

\* The machine took this step too, into the same state, with the same effects, each
\* once and in the order of the step's phases (EffectsAre).
Agrees(S, E, O, T) ==
    depth = 1 =>
        LET t == MachineStep(E, T)
        IN /\ t # <<>>
           /\ S[t[2]] = <<grp, issued>>
           /\ EffectsAre(O[t[3]], out)

=============================================================================
