---------------------- MODULE GroupCoordinatorDurable -----------------------
(***************************************************************************)
(* The group coordinator at its I/O boundary: what is written to Redis,    *)
(* what survives which crash, and what the clients are told when.          *)
(*                                                                         *)
(* GroupCoordinator.tla is the machine (korvet/core/coordinator/): a step   *)
(* maps the group and a request to a group and effects.  Here every step   *)
(* is followed by the adapter's Persist (korvet/server/coordinator.py):     *)
(* the group's snapshot is written to Redis, and only then are the step's   *)
(* replies sent (`wire`).  The write may fail (PersistFails): the machine   *)
(* goes back to the last snapshot it knows Redis took (`saved`) and every   *)
(* reply of the step, and every request still held back, is answered with  *)
(* COORDINATOR_NOT_AVAILABLE, which Kafka's clients retry.  The write may  *)
(* also land although the adapter saw it fail (a lost reply).              *)
(*                                                                         *)
(* The broker may restart at any moment (BrokerRestart): it loads what     *)
(* Redis holds (`dur`), not what it had in memory.  Redis may restart too  *)
(* (RedisCrash): it comes back with what was fsynced (`disk`).  With       *)
(* `appendfsync always` every write Redis acknowledged is on disk           *)
(* (FsyncEveryWrite); with `everysec` the last second may be lost.         *)
(*                                                                         *)
(* Korvet's rule for a load after Redis restarted (RaiseAfterLoss): the     *)
(* coordinator keeps, durably (written with an fsync barrier), how many    *)
(* such loads it has made and which Redis life it last loaded from.  If    *)
(* Redis restarted since, replies may have revealed generations the        *)
(* snapshot no longer has, so every group's generation is raised to a new  *)
(* band, (loads + 1) * Stride, and groups that are not Empty rebalance.    *)
(* TLC checks that no generation number is then revealed twice with a      *)
(* different protocol or assignment, across any number of restarts, and   *)
(* (GroupCoordinatorDurable-Everysec-NoRaise) that without the rule it is.  *)
(***************************************************************************)
EXTENDS GroupCoordinator

CONSTANTS
    FsyncEveryWrite,  \* TRUE: Redis fsyncs every write it acknowledges (appendfsync always)
    WriteMayFail,     \* Redis may refuse a write (min-replicas-to-write, OOM, a failover)
    RaiseAfterLoss,   \* Korvet's rule above
    Stride,           \* generations one band holds (2^20 in Korvet)
    MaxCrashes        \* CONSTRAINT: broker restarts and Redis crashes explored

VARIABLES
    phase,      \* "idle", or "persist": a step of the machine whose snapshot is not written yet
    saved,      \* the snapshot the adapter last wrote (its durable copy: queries read it)
    dur,        \* the snapshot Redis holds
    disk,       \* the snapshot that survives a Redis crash (fsynced)
    bands,      \* durable: loads that raised generations (each starts a new band)
    loadLife,   \* durable: redisLife when the coordinator last loaded
    redisLife,  \* Redis restarts so far
    wire,       \* the replies clients received in this transition
    seenGen,    \* history: <<generation, protocol>> revealed by JoinGroup replies, this group life
    seenAsg,    \* history: <<generation, member, assignment>> revealed by SyncGroup replies
    durMark,    \* Redis holds the clean-stop mark of the last coordinator (written after its last write)
    diskMark,   \* ... and it is fsynced
    behind,     \* Redis lost a write the adapter's copy reflects (a crash before the fsync)
    rolledBack, \* history: a load went back behind the adapter's copy (readers saw time reverse)
    crashes     \* broker restarts and Redis crashes so far

io == <<phase, saved, dur, disk, bands, loadLife, redisLife, wire, seenGen, seenAsg, durMark,
        diskMark, behind, rolledBack, crashes>>
allVars == <<vars, io>>

-----------------------------------------------------------------------------
(* The adapter *)

Replies(S) == {e \in S : e.api \notin {"PersistOffsets", "DeleteGroupData"}}

\* What a reply becomes when the state it reveals could not be written: the answer to the
\* same request (`to`), COORDINATOR_NOT_AVAILABLE.
Unavailable(e) ==
    CASE e.api = "JoinGroup"    -> JoinErrorTo(e.to, COORDINATOR_NOT_AVAILABLE, e.mid)
      [] e.api = "SyncGroup"    -> SyncError(e.to, COORDINATOR_NOT_AVAILABLE)
      [] e.api = "Heartbeat"    -> HeartbeatReply(e.to, COORDINATOR_NOT_AVAILABLE)
      [] e.api = "LeaveGroup"   -> LeaveReply(COORDINATOR_NOT_AVAILABLE, <<>>)
      [] e.api = "OffsetCommit" -> CommitReply(e.to, COORDINATOR_NOT_AVAILABLE)
      [] e.api = "DeleteGroups" -> DeleteReply(COORDINATOR_NOT_AVAILABLE)

\* The answers of the requests a group holds back when it goes back to a snapshot.
Parked(g) ==
    {JoinError(COORDINATOR_NOT_AVAILABLE, m) : m \in {x \in DOMAIN g.members : g.members[x].awaitingJoin}}
    \cup {SyncError(m, COORDINATOR_NOT_AVAILABLE) : m \in {x \in DOMAIN g.members : g.members[x].awaitingSync}}

\* A step of the machine; its effects wait in `out` until Persist.
MachineNext ==
    \/ JoinGroup \/ SyncGroup \/ Heartbeat \/ LeaveGroup \/ OffsetCommit
    \/ DeleteGroups \/ GroupDataDeleted
    \/ SessionTimeout \/ PendingMemberTimeout \/ RebalanceTimeout \/ PendingSyncTimeout

\* A step of the machine by action A (Step: any of them; trace validation,
\* spec/GroupCoordinatorTrace.tla, names the one a log line records).
StepOf(A) ==
    /\ phase = "idle"
    /\ A
    /\ phase' = "persist"
    /\ wire' = {}
    /\ UNCHANGED <<saved, dur, disk, bands, loadLife, redisLife, seenGen, seenAsg, durMark,
                   diskMark, behind, rolledBack, crashes>>

Step == StepOf(MachineNext)

\* A group's life ends when Redis stops holding it (DeleteGroups, then the clean-up):
\* what was revealed in it no longer constrains anything.
LifeEnds == dur.state = "Dead" /\ dur'.state = "Absent"

JoinsRevealed(S) == {<<r.gen, r.proto>> : r \in {x \in S : x.api = "JoinGroup" /\ x.err = NONE}}
SyncsRevealed(S, gen) == {<<gen, r.to, r.asg>> : r \in {x \in S : x.api = "SyncGroup" /\ x.err = NONE}}

\* The snapshot is written (if it changed since the adapter's last write), then
\* the replies go out.  A group that is gone ends its life: the history starts over.
Persist ==
    /\ phase = "persist"
    /\ LET snap == Snapshot(grp)
           write == snap # saved
           replies == Replies(out)
       IN /\ dur' = IF write THEN snap ELSE dur
          /\ disk' = IF write /\ FsyncEveryWrite THEN snap ELSE disk
          /\ saved' = snap
          /\ behind' = (behind /\ ~write)
          /\ wire' = replies
          /\ seenGen' = IF LifeEnds THEN {} ELSE seenGen \cup JoinsRevealed(replies)
          /\ seenAsg' = IF LifeEnds THEN {} ELSE seenAsg \cup SyncsRevealed(replies, grp.generation)
    /\ phase' = "idle"
    /\ out' = {}
    /\ UNCHANGED <<grp, issued, calm, floor, bands, loadLife, redisLife, durMark, diskMark,
                   rolledBack, crashes>>

\* The step has something to write: the group's snapshot changed, or it stored committed
\* offsets (the adapter writes every commit it acknowledges, also offsets the group held
\* already: a consumer's auto-commit sends the same ones every interval).
Writes == Snapshot(grp) # saved \/ \E e \in out : e.api = "PersistOffsets"

\* Redis did not take the write (or took it, and its answer was lost): the group goes
\* back to the adapter's last snapshot; everyone waiting is told to retry.
PersistFails ==
    /\ WriteMayFail
    /\ phase = "persist"
    /\ Writes
    /\ \E landed \in BOOLEAN :
          /\ dur' = IF landed THEN Snapshot(grp) ELSE dur
          /\ disk' = IF landed /\ FsyncEveryWrite THEN Snapshot(grp) ELSE disk
          /\ behind' = (behind /\ ~landed)
    /\ seenGen' = IF LifeEnds THEN {} ELSE seenGen
    /\ seenAsg' = IF LifeEnds THEN {} ELSE seenAsg
    /\ grp' = saved
    /\ out' = {}
    /\ wire' = {Unavailable(e) : e \in Replies(out)} \cup Parked(grp)
    /\ phase' = "idle"
    /\ UNCHANGED <<issued, calm, floor, saved, bands, loadLife, redisLife, durMark, diskMark,
                   rolledBack, crashes>>

\* Korvet's raise: a group moves to the band's first generation; one with members
\* rebalances (its members rejoin, as after any restart).
Raise(g, fl) ==
    CASE g.state \in {"Absent", "Dead"} -> g
      [] g.state = "Empty" -> [g EXCEPT !.generation = fl]
      [] OTHER -> PrepareRebalance([g EXCEPT !.generation = fl])[1]

\* The broker stops cleanly: after its last write it leaves a mark in Redis.  Redis' file
\* is a log: if the mark survives a crash, every earlier write of the same Redis life
\* survived with it.  If Redis restarted while the broker ran (it may have lost writes
\* the broker's replies revealed), the broker first writes every snapshot again from
\* its copy, so that the mark vouches for all of them.
CleanStop ==
    /\ crashes < MaxCrashes
    /\ phase = "idle"
    /\ phase' = "stopped"
    /\ LET rewrite == redisLife # loadLife
       IN /\ dur' = IF rewrite THEN saved ELSE dur
          /\ disk' = IF rewrite /\ FsyncEveryWrite THEN saved ELSE disk
          /\ behind' = (behind /\ ~rewrite)
    /\ durMark' = TRUE
    /\ diskMark' = IF FsyncEveryWrite THEN TRUE ELSE diskMark
    /\ wire' = {}
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<vars, saved, bands, loadLife, redisLife, seenGen, seenAsg, rolledBack>>

\* The broker (re)starts and loads the snapshot Redis holds.  A write in flight may have
\* landed.  If Redis restarted since the last load, may have lost its last second of
\* writes, and holds no clean-stop mark, Korvet raises the generations to a new band.
\* The load's record (bands, the Redis life, the consumed mark) is written with an fsync
\* barrier before anything is served, so it is never lost.
BrokerRestart ==
    /\ phase = "stopped" \/ crashes < MaxCrashes
    /\ \E landed \in (IF phase = "persist" /\ Snapshot(grp) # saved THEN BOOLEAN ELSE {FALSE}) :
          LET d == IF landed THEN Snapshot(grp) ELSE dur
              lossy == RaiseAfterLoss /\ ~FsyncEveryWrite /\ redisLife # loadLife /\ ~durMark
              fl == IF lossy THEN (bands + 1) * Stride ELSE floor
              loaded == IF lossy THEN Raise(d, fl) ELSE d
              \* a raised group is written with the load's fsync barrier, before serving
              written == Snapshot(loaded)
          IN /\ dur' = IF lossy THEN written ELSE d
             /\ disk' = IF lossy THEN written ELSE IF landed /\ FsyncEveryWrite THEN d ELSE disk
             /\ grp' = loaded
             /\ saved' = IF lossy THEN written ELSE d
             /\ bands' = IF lossy THEN bands + 1 ELSE bands
             /\ floor' = fl
             /\ out' = {}  \* (a Dead group's clean-up is ordered again: GroupDataDeleted follows)
             /\ behind' = (behind /\ ~landed /\ ~lossy)
             /\ rolledBack' = (rolledBack \/ (behind /\ ~landed))
             /\ seenGen' = IF LifeEnds THEN {} ELSE seenGen
             /\ seenAsg' = IF LifeEnds THEN {} ELSE seenAsg
    /\ loadLife' = redisLife
    /\ durMark' = FALSE
    /\ diskMark' = FALSE
    /\ phase' = "idle"
    /\ wire' = {}
    /\ crashes' = IF phase = "stopped" THEN crashes ELSE crashes + 1
    /\ UNCHANGED <<issued, calm, redisLife>>

\* Redis restarts from its append-only file: what was not fsynced is gone.  The
\* broker keeps running with its memory (and an adapter copy that Redis no longer has).
RedisCrash ==
    /\ crashes < MaxCrashes
    /\ dur' = disk
    /\ durMark' = diskMark
    /\ redisLife' = redisLife + 1
    /\ behind' = (behind \/ disk # dur)
    /\ crashes' = crashes + 1
    /\ wire' = {}
    /\ UNCHANGED <<vars, phase, saved, disk, diskMark, bands, loadLife, seenGen, seenAsg,
                   rolledBack>>

\* Redis restarts cleanly (SHUTDOWN fsyncs the file first): nothing is lost.
RedisRestart ==
    /\ crashes < MaxCrashes
    /\ disk' = dur
    /\ diskMark' = durMark
    /\ redisLife' = redisLife + 1
    /\ crashes' = crashes + 1
    /\ wire' = {}
    /\ UNCHANGED <<vars, phase, saved, dur, durMark, bands, loadLife, seenGen, seenAsg, behind,
                   rolledBack>>

\* appendfsync everysec: the background fsync.
Fsync ==
    /\ ~FsyncEveryWrite
    /\ disk # dur \/ diskMark # durMark
    /\ disk' = dur
    /\ diskMark' = durMark
    /\ wire' = {}
    /\ UNCHANGED <<vars, phase, saved, dur, durMark, bands, loadLife, redisLife, seenGen, seenAsg,
                   behind, rolledBack, crashes>>

DurableInit ==
    /\ Init
    /\ phase = "idle"
    /\ saved = AbsentGroup /\ dur = AbsentGroup /\ disk = AbsentGroup
    /\ bands = 0 /\ loadLife = 0 /\ redisLife = 0
    /\ wire = {} /\ seenGen = {} /\ seenAsg = {}
    /\ durMark = FALSE /\ diskMark = FALSE
    /\ behind = FALSE /\ rolledBack = FALSE
    /\ crashes = 0

DurableNext == Step \/ Persist \/ PersistFails \/ CleanStop \/ BrokerRestart \/ RedisCrash
               \/ RedisRestart \/ Fsync

DurableSpec == DurableInit /\ [][DurableNext]_allVars

\* Generations above the group's band, and the crashes, are bounded by the models.
DurableConstraint ==
    /\ grp.generation - floor <= MaxGeneration
    /\ crashes <= MaxCrashes

-----------------------------------------------------------------------------
(* Invariants *)

Readable(g) == g.state \notin {"Absent", "Dead"}

\* No generation number is revealed twice with a different protocol, and no member is
\* told two assignments for one generation: across every restart and crash of a
\* group's life.
GenerationUnique ==
    /\ \A a, b \in seenGen : a[1] = b[1] => a[2] = b[2]
    /\ \A a, b \in seenAsg : a[1] = b[1] /\ a[2] = b[2] => a[3] = b[3]

\* What a reply revealed survives any crash: Redis' fsynced snapshot holds that
\* generation or a later one (or the group is being deleted), and, for the revealed
\* generation, each member's revealed assignment while the group is Stable.
RevealedSurvives ==
    /\ \A r \in seenGen : disk.state = "Dead" \/ (Readable(disk) /\ disk.generation >= r[1])
    /\ \A r \in seenAsg :
          (disk.state = "Stable" /\ disk.generation = r[1] /\ r[2] \in DOMAIN disk.members)
              => disk.members[r[2]].assignment = r[3]

\* Replies leave only after their step's snapshot was written (or as errors): what a
\* reply on the wire reveals (a JoinGroup answer's generation and protocol, a SyncGroup
\* answer's assignment) is what the adapter's durable copy holds, the snapshot Redis took
\* (`saved`, updated only when a write is taken).  A reply sent before its write, or
\* although the write failed, reveals a state Redis may never hold
\* (GroupCoordinatorDurable-mutant-RepliesAfterPersist); and none leaves while a step
\* waits for its write.
RepliesAfterPersist ==
    /\ phase = "persist" => wire = {}
    /\ \A r \in wire :
          /\ r.api = "JoinGroup" /\ r.err = NONE =>
                /\ Readable(saved)
                /\ saved.generation = r.gen
                /\ saved.protocolName = r.proto
          /\ r.api = "SyncGroup" /\ r.err = NONE =>
                /\ saved.state = "Stable"
                /\ r.to \in DOMAIN saved.members
                /\ saved.members[r.to].assignment = r.asg

\* Committed offsets (and everything else a reader sees) never go backwards: queries
\* (OffsetFetch, DescribeGroups) answer from the adapter's copy, and no load puts an
\* older snapshot in its place than the one it reflects.
NoRollback == ~rolledBack

\* The durable generation only moves forward within a group's life (the machine's own
\* may go back when a write fails: what it held was never revealed).
DurableGenerationIncreases ==
    [][Readable(saved) /\ Readable(saved') => saved'.generation >= saved.generation]_allVars

DurableTypeOK ==
    /\ TypeOK
    /\ phase \in {"idle", "persist", "stopped"}
    /\ bands \in Nat /\ floor \in Nat /\ crashes \in 0..MaxCrashes

\* States are told apart without the replies of the last transition (outputs only).
DurableView == <<vars, phase, saved, dur, disk, bands, loadLife, redisLife, seenGen, seenAsg,
                 durMark, diskMark, behind, rolledBack, crashes>>

=============================================================================
