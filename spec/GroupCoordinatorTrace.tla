------------------------ MODULE GroupCoordinatorTrace ------------------------
(***************************************************************************)
(* Trace validation: is what a running broker did a behaviour of           *)
(* GroupCoordinatorDurable?                                                *)
(*                                                                         *)
(* The broker's event log (korvet serve --groups-event-log) records every  *)
(* start (the snapshot it loaded), every step of the coordinator (the      *)
(* event, the machine's effects, whether the write was taken, the replies  *)
(* actually sent) and every stop.  `korvet spec validate LOG`              *)
(* (korvet/verification/validate.py) turns the lines of one group into TraceLog,   *)
(* a sequence of records whose values are the spec's (member ids renamed   *)
(* in order of issue, assignments, metadata, partitions and offsets        *)
(* renamed to labels), written as literals in a generated module,          *)
(* GroupCoordinatorTraceData, which also defines the values its config     *)
(* binds the spec's constants to.  (A definition is evaluated once; a     *)
(* constant bound with <- in the config would be evaluated at every use.)  *)
(* TLC then searches, breadth first, for a behaviour of the spec whose    *)
(* steps are, one after the other, the logged ones with the logged         *)
(* outputs; `l` is how many entries are matched.  The log is accepted when *)
(* some state has l = Len(TraceLog) + 1.                                   *)
(*                                                                         *)
(* Entries (field `kind`):                                                 *)
(*   "step"    a machine step: StepOf(the logged action with the logged    *)
(*             parameters) whose effects are the logged ones (`out`: each  *)
(*             once, in the order of the step's phases, EffectsAre), then  *)
(*             Persist or PersistFails as the log says, whose replies are  *)
(*             the ones the broker sent (`wire`), each once and in the     *)
(*             order the adapter sends them (SentInOrder).  A reply's      *)
(*             `to` is the request it answers (validate.py reads it off    *)
(*             the reply's request id).  With nothing to write ("none")    *)
(*             the spec must agree that nothing changed.                   *)
(*   "load"    BrokerRestart: the loaded group, the generation floor and   *)
(*             whether generations were raised are the logged ones.        *)
(*   "stop"    CleanStop (the broker left its clean-stop mark).            *)
(*   "stutter" a log line that changes nothing the spec sees: a timer that *)
(*             found nothing to do, the Restart step right after a load,   *)
(*             a request the spec does not model that changed nothing      *)
(*             (validate.py checks that, and reports each kind).           *)
(* Redis' own restarts and fsyncs are not logged: before an entry whose    *)
(* `env` allows it, TLC may insert RedisRestart, RedisCrash (at most one   *)
(* between two loads) and Fsync; validate.py allows them where the log     *)
(* shows that Redis restarted (its run id changed).                        *)
(***************************************************************************)
EXTENDS GroupCoordinatorDurable, TLC, GroupCoordinatorTraceData

\* GroupCoordinatorTraceData defines:
\*   TraceLog    the entries, in order
\*   InitGrp     the group when the trace starts (AbsentGroup for a fresh Redis)
\*   InitSaved   what Redis holds of it then
\*   InitIssued  how many ids of MemberIds were handed out before
\*   InitFloor   the generation floor then
\*   InitBands   the loads that raised generations before
\*   Relaxed     diagnosis: the entry whose outputs are left free (0: none)

VARIABLE l       \* the next entry to match

traceVars == <<allVars, l>>

E == TraceLog[l]

StartsAtInit ==
    InitGrp = AbsentGroup /\ InitSaved = AbsentGroup /\ InitIssued = 0 /\ InitFloor = 0
    /\ InitBands = 0

TraceInit ==
    /\ l = 1
    /\ TLCSet(1, 0)
    /\ IF StartsAtInit THEN DurableInit
       ELSE /\ grp = InitGrp /\ out = {} /\ issued = InitIssued /\ calm = FALSE
            /\ floor = InitFloor /\ phase = "idle"
            /\ saved = InitSaved /\ dur = InitSaved /\ disk = InitSaved
            /\ bands = InitBands /\ loadLife = 0 /\ redisLife = 0
            /\ wire = {} /\ seenGen = {} /\ seenAsg = {}
            /\ durMark = FALSE /\ diskMark = FALSE /\ behind = FALSE /\ rolledBack = FALSE
            /\ crashes = 0

\* The spec's action for a logged event, with the logged parameters.
MachineAction(e) ==
    \/ e.act = "JoinGroup" /\ JoinGroupReq(e.mid, e.inst, e.protos, e.sessionOk,
                                           e.requireKnown, e.skipOk)
    \/ e.act = "SyncGroup" /\ SyncGroupReq(e.mid, e.inst, e.gen, e.asg, e.pname)
    \/ e.act = "Heartbeat" /\ HeartbeatReq(e.mid, e.inst, e.gen)
    \/ e.act = "LeaveGroup" /\ LeaveGroupReq(e.batch)
    \/ e.act = "OffsetCommit" /\ OffsetCommitReq(e.mid, e.inst, e.gen, e.offs, e.v9)
    \/ e.act = "DeleteGroups" /\ DeleteGroups
    \/ e.act = "GroupDataDeleted" /\ GroupDataDeleted
    \/ e.act = "SessionTimeout" /\ SessionTimeoutOf(e.mid)
    \/ e.act = "PendingMemberTimeout" /\ PendingMemberTimeoutOf(e.mid)
    \/ e.act = "RebalanceTimeout" /\ RebalanceTimeout
    \/ e.act = "PendingSyncTimeout" /\ PendingSyncTimeout

Free == l = Relaxed

MatchStep ==
    /\ E.kind = "step"
    /\ StepOf(MachineAction(E))
    /\ Free \/ EffectsAre(E.out, out')
    /\ l' = l

\* The replies sent, in the order sent: the step's replies in the step's order (the
\* write taken, or nothing to write), or each of them as COORDINATOR_NOT_AVAILABLE,
\* then the answers of the requests the group held back (the write refused).
SentInOrder(e) ==
    LET r == SelectSeq(e.out, IsReply)
    IN IF e.persisted = "failed"
       THEN /\ Len(e.sent) >= Len(r)
            /\ \A i \in 1..Len(r) : e.sent[i] = Unavailable(r[i])
       ELSE e.sent = r

MatchPersist ==
    /\ E.kind = "step"
    /\ phase = "persist"
    /\ \/ E.persisted = "ok" /\ Persist
       \/ E.persisted = "none" /\ Snapshot(grp) = saved /\ Persist
       \/ E.persisted = "failed" /\ PersistFails
    /\ Free \/ (Range(E.sent) = wire' /\ Len(E.sent) = Cardinality(wire') /\ SentInOrder(E))
    /\ l' = l + 1

MatchStutter ==
    /\ E.kind = "stutter"
    /\ phase # "persist"
    /\ UNCHANGED allVars
    /\ l' = l + 1

MatchStop ==
    /\ E.kind = "stop"
    /\ CleanStop
    /\ l' = l + 1

MatchLoad ==
    /\ E.kind = "load"
    /\ E.redis = "same" => redisLife = loadLife
    /\ E.redis = "restarted" => redisLife # loadLife
    /\ BrokerRestart
    /\ Free \/ (grp' = E.grp /\ floor' = E.floor /\ (bands' # bands) = E.lossy)
    /\ l' = l + 1

\* What the log does not record: Redis restarting (once between two loads) and fsyncing.
EnvStep ==
    /\ E.env # "none"
    /\ phase # "persist"
    /\ \/ redisLife = loadLife /\ (RedisRestart \/ RedisCrash)
       \/ Fsync
    /\ l' = l

TraceNext ==
    /\ l <= Len(TraceLog)
    /\ \/ MatchStep \/ MatchPersist \/ MatchStutter \/ MatchStop \/ MatchLoad
       \/ EnvStep

TraceSpec == TraceInit /\ [][TraceNext]_traceVars

-----------------------------------------------------------------------------
(* Progress: TLC prints how far it got (2 * entry, +1 in the middle of a   *)
(* step); validate.py reads the furthest point.  In a diagnosis run it     *)
(* also prints what the spec did at the relaxed entry.                     *)

Reached == 2 * l + (IF phase = "persist" THEN 1 ELSE 0)

Diagnose ==
    CASE Relaxed = 0 -> TRUE
      [] l = Relaxed /\ phase # "persist" ->
             PrintT(<<"korvet-diag", "before", grp, saved, phase>>)
      [] l = Relaxed /\ phase = "persist" -> PrintT(<<"korvet-diag", "step", out, grp>>)
      [] l = Relaxed + 1 -> PrintT(<<"korvet-diag", "after", wire, grp, saved, floor, bands>>)
      [] OTHER -> TRUE

TraceProgress ==
    /\ IF Reached > TLCGet(1)
       THEN TLCSet(1, Reached) /\ PrintT(<<"korvet-trace", Reached>>)
       ELSE TRUE
    /\ Diagnose

=============================================================================
