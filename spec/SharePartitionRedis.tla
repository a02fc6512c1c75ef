------------------------ MODULE SharePartitionRedis ------------------------
(***************************************************************************)
(* The share partition on Redis (issue 33): one share group on one        *)
(* partition is one Redis consumer group on the partition's stream; its   *)
(* pending entries list (PEL) holds the acquired records, each with its   *)
(* owner consumer, idle time and delivery counter. Redis' commands, and   *)
(* the broker's Lua scripts around them with their guards, are the        *)
(* actions; `Refines` checks that every behaviour of this module is one  *)
(* of Kafka's share partition (spec/SharePartition.tla) under the mapping *)
(* below. The argument is in docs/spec/share-groups.md.                   *)
(*                                                                         *)
(* Where Redis' consumer group is not Kafka's share partition, and the    *)
(* broker's scripts bridge it:                                             *)
(*  - XACK checks nothing: the acknowledgement script first reads the     *)
(*    entry (XPENDING key g id id 1) and acknowledges only for its owner, *)
(*    under a live lock (idle < lock duration), above the log start.      *)
(*  - Redis expires nothing: a lock that ran out is an entry idle for the *)
(*    lock duration; the fetch script claims it (XAUTOCLAIM min-idle).    *)
(*  - Redis has no AVAILABLE-but-delivered state: RELEASE moves the entry *)
(*    to a parking consumer, idle set to the lock duration (XCLAIM ...    *)
(*    IDLE), so the next fetch claims it at once, lowest id first.        *)
(*  - Redis has no delivery limit and no ARCHIVED: the scripts XACK a     *)
(*    record at the limit instead of claiming it, and keep no other trace *)
(*    (`fate` is a history variable of the proof, not broker state).      *)
(*  - XTRIM keeps the PEL's references to trimmed entries: the scripts    *)
(*    treat them as archived and drop them.                               *)
(* Redis' idle times are kept up to the lock duration: no guard compares *)
(* them with anything larger.                                              *)
(***************************************************************************)
EXTENDS Integers, FiniteSets, TLC

CONSTANTS Consumers, MaxRecords, Limit, LockTime, MaxInFlight, MaxTrims, MaxCloses

ASSUME /\ MaxRecords \in Nat /\ Limit \in Nat \ {0} /\ LockTime \in Nat \ {0}
       /\ MaxInFlight \in Nat \ {0} /\ MaxTrims \in Nat /\ MaxCloses \in Nat

Offsets == 0..(MaxRecords - 1)
NoOwner == "none"
\* The consumer that released records are parked on (a Redis consumer no session uses).
Park == "park"
NoAck == [c |-> NoOwner, o |-> -1]
\* Not in the PEL.
NotPending == [owner |-> NoOwner, idle |-> 0, count |-> 0]
NoFate == [state |-> "none", count |-> 0]
Min(S) == CHOOSE x \in S : \A y \in S : x <= y

VARIABLES
    end,       \* the stream's entries are 0..end-1 (XADD); Korvet's offset is the id
    logStart,  \* the first entry kept (XTRIM MINID); Korvet's meta hash `start`
    lastId,    \* the group's last-delivered-id (-1: none, XGROUP CREATE ... 0)
    pel,       \* pel[o]: o's pending entry: owner consumer, idle ticks, delivery counter
    hold,      \* hold[c][o]: consumer c's view, as in SharePartition.tla
    acker,     \* ghost: the consumer and record of this step's acknowledgement, or NoAck
    rejected,  \* ghost: the records a consumer rejected
    fate,      \* history: what the XACK that removed o from the PEL meant, and its count
    trims,     \* XTRIMs so far
    closes     \* sessions closed so far

vars == <<end, logStart, lastId, pel, hold, acker, rejected, fate, trims, closes>>

Init ==
    /\ end = 0 /\ logStart = 0 /\ lastId = -1
    /\ pel = [o \in Offsets |-> NotPending]
    /\ hold = [c \in Consumers |-> [o \in Offsets |-> -1]]
    /\ acker = NoAck /\ rejected = {}
    /\ fate = [o \in Offsets |-> NoFate]
    /\ trims = 0 /\ closes = 0

Pending(o) == pel[o].owner # NoOwner
\* A lock the broker honours: a session's entry, idle less than the lock duration, kept.
Live(o) == pel[o].owner \in Consumers /\ pel[o].idle < LockTime /\ o >= logStart
\* An entry the fetch script may hand out again: idle for the lock duration (expired, or
\* parked by a release), below the limit, kept.
Claimable(o) == Pending(o) /\ o >= logStart /\ pel[o].idle = LockTime /\ pel[o].count < Limit
\* The entry XREADGROUP > delivers next: the first kept one after the last delivered.
NextNew == IF lastId + 1 >= logStart THEN lastId + 1 ELSE logStart

\* XACK of o, and what it meant (Redis keeps neither).
XAck(o, st) ==
    /\ pel' = [pel EXCEPT ![o] = NotPending]
    /\ fate' = [fate EXCEPT ![o] = [state |-> st, count |-> pel[o].count]]

-----------------------------------------------------------------------------
(* Redis commands and the broker's scripts, each one atomic step *)

\* XADD: the produce path appends a record.
XAdd ==
    /\ end < MaxRecords
    /\ end' = end + 1
    /\ acker' = NoAck
    /\ UNCHANGED <<logStart, lastId, pel, hold, rejected, fate, trims, closes>>

\* The fetch script's in-flight check: the live locks (XPENDING's count less the idle
\* and parked entries), against group.share.partition.max.record.locks.
RoomInFlight == Cardinality({o \in Offsets : Live(o)}) < MaxInFlight

\* The fetch script, first: the lowest claimable entry (XAUTOCLAIM key g c <lock ms> 0-0
\* COUNT 1, after XPENDING showed its counter below the limit) goes to c; the claim
\* resets its idle time and raises its delivery counter.
Claim(c) ==
    /\ RoomInFlight
    /\ \E x \in Offsets : Claimable(x)
    /\ LET o == Min({x \in Offsets : Claimable(x)}) IN
         /\ pel' = [pel EXCEPT ![o] = [owner |-> c, idle |-> 0, count |-> @.count + 1]]
         /\ hold' = [hold EXCEPT ![c][o] = LockTime]
    /\ acker' = NoAck
    /\ UNCHANGED <<end, logStart, lastId, rejected, fate, trims, closes>>

\* ... and when nothing is claimable: XREADGROUP GROUP g c COUNT 1 STREAMS key >, the next
\* entry after the last delivered, into c's PEL with a counter of 1.
ReadNew(c) ==
    /\ RoomInFlight
    /\ ~\E x \in Offsets : Claimable(x)
    /\ NextNew < end
    /\ pel' = [pel EXCEPT ![NextNew] = [owner |-> c, idle |-> 0, count |-> 1]]
    /\ lastId' = NextNew
    /\ hold' = [hold EXCEPT ![c][NextNew] = LockTime]
    /\ acker' = NoAck
    /\ UNCHANGED <<end, logStart, rejected, fate, trims, closes>>

\* The acknowledgement script's guard (XPENDING key g o o 1, and the stream's first id):
\* c's own entry, its lock live, not trimmed. Anything else is INVALID_RECORD_STATE.
Guard(c, o) == pel[o].owner = c /\ pel[o].idle < LockTime /\ o >= logStart

\* ACCEPT: XACK.
Accept(c, o) ==
    /\ hold[c][o] >= 0
    /\ Guard(c, o)
    /\ XAck(o, "ACKNOWLEDGED")
    /\ hold' = [hold EXCEPT ![c][o] = -1]
    /\ acker' = [c |-> c, o |-> o]
    /\ UNCHANGED <<end, logStart, lastId, rejected, trims, closes>>

\* REJECT: XACK too (Redis cannot tell it from an accept afterwards).
Reject(c, o) ==
    /\ hold[c][o] >= 0
    /\ Guard(c, o)
    /\ XAck(o, "ARCHIVED")
    /\ rejected' = rejected \cup {o}
    /\ hold' = [hold EXCEPT ![c][o] = -1]
    /\ acker' = [c |-> c, o |-> o]
    /\ UNCHANGED <<end, logStart, lastId, trims, closes>>

\* RELEASE: at the limit XACK (archived); below it XCLAIM key g park 0 o IDLE <lock ms>
\* JUSTID: parked, claimable at once, its counter unchanged.
Release(c, o) ==
    /\ hold[c][o] >= 0
    /\ Guard(c, o)
    /\ IF pel[o].count >= Limit
         THEN XAck(o, "ARCHIVED")
         ELSE /\ pel' = [pel EXCEPT ![o] = [@ EXCEPT !.owner = Park, !.idle = LockTime]]
              /\ UNCHANGED fate
    /\ hold' = [hold EXCEPT ![c][o] = -1]
    /\ acker' = [c |-> c, o |-> o]
    /\ UNCHANGED <<end, logStart, lastId, rejected, trims, closes>>

\* RENEW: XCLAIM key g c 0 o JUSTID: the idle time restarts, the counter stays.
Renew(c, o) ==
    /\ hold[c][o] >= 0
    /\ Guard(c, o)
    /\ pel' = [pel EXCEPT ![o].idle = 0]
    /\ hold' = [hold EXCEPT ![c][o] = LockTime]
    /\ acker' = [c |-> c, o |-> o]
    /\ UNCHANGED <<end, logStart, lastId, rejected, fate, trims, closes>>

\* The guard refuses: INVALID_RECORD_STATE, nothing in Redis changes.
AckRefused(c, o) ==
    /\ hold[c][o] >= 0
    /\ ~Guard(c, o)
    /\ hold' = [hold EXCEPT ![c][o] = -1]
    /\ acker' = NoAck
    /\ UNCHANGED <<end, logStart, lastId, pel, rejected, fate, trims, closes>>

\* Redis' clock: every pending entry is idle a tick longer; the consumers count down.
Tick ==
    /\ pel' = [o \in Offsets |->
                 IF Pending(o) /\ pel[o].idle < LockTime
                   THEN [pel[o] EXCEPT !.idle = @ + 1] ELSE pel[o]]
    /\ hold' = [c \in Consumers |-> [o \in Offsets |->
                  IF hold[c][o] > 0 THEN hold[c][o] - 1 ELSE hold[c][o]]]
    /\ acker' = NoAck
    /\ UNCHANGED <<end, logStart, lastId, rejected, fate, trims, closes>>

\* c's connection closes: the broker's close hook parks c's kept entries (XCLAIM to the
\* parking consumer, IDLE <lock ms>), and XACKs those at the limit.
CloseSession(c) ==
    LET mine == {o \in Offsets : pel[o].owner = c /\ o >= logStart}
        done == {o \in mine : pel[o].count >= Limit}
    IN
    /\ closes < MaxCloses
    /\ pel' = [o \in Offsets |->
                 IF o \in done THEN NotPending
                 ELSE IF o \in mine THEN [pel[o] EXCEPT !.owner = Park, !.idle = LockTime]
                 ELSE pel[o]]
    /\ fate' = [o \in Offsets |->
                  IF o \in done THEN [state |-> "ARCHIVED", count |-> pel[o].count] ELSE fate[o]]
    /\ hold' = [hold EXCEPT ![c] = [o \in Offsets |-> -1]]
    /\ closes' = closes + 1
    /\ acker' = NoAck
    /\ UNCHANGED <<end, logStart, lastId, rejected, trims>>

\* Retention or DeleteRecords: XTRIM key MINID s (the PEL keeps its references).
XTrim(s) ==
    /\ trims < MaxTrims
    /\ s \in (logStart + 1)..end
    /\ logStart' = s
    /\ trims' = trims + 1
    /\ acker' = NoAck
    /\ UNCHANGED <<end, lastId, pel, hold, rejected, fate, closes>>

\* The fetch script meets an entry idle for the lock duration at the limit: XACK
\* (archived) instead of a claim.
ArchiveAtLimit(o) ==
    /\ Pending(o) /\ o >= logStart
    /\ pel[o].idle = LockTime /\ pel[o].count >= Limit
    /\ XAck(o, "ARCHIVED")
    /\ UNCHANGED <<end, logStart, lastId, hold, acker, rejected, trims, closes>>

\* A reference to a trimmed entry leaves the PEL (XAUTOCLAIM drops it, Redis >= 7.0, or
\* the script's XACK).
DropTrimmed(o) ==
    /\ Pending(o) /\ o < logStart
    /\ XAck(o, "ARCHIVED")
    /\ UNCHANGED <<end, logStart, lastId, hold, acker, rejected, trims, closes>>

Next ==
    \/ XAdd \/ Tick
    \/ \E c \in Consumers :
         \/ Claim(c) \/ ReadNew(c) \/ CloseSession(c)
         \/ \E o \in Offsets :
              Accept(c, o) \/ Release(c, o) \/ Reject(c, o) \/ Renew(c, o) \/ AckRefused(c, o)
    \/ \E s \in 0..MaxRecords : XTrim(s)
    \/ \E o \in Offsets : ArchiveAtLimit(o) \/ DropTrimmed(o)

Spec == Init /\ [][Next]_vars

\* Fair consumers and a fair broker: time passes, fetches are served, and each consumer
\* ends what it holds (as in SharePartition.tla).
Fairness ==
    /\ WF_vars(Tick)
    /\ WF_vars(\E c \in Consumers : Claim(c) \/ ReadNew(c))
    /\ \A c \in Consumers :
         WF_vars(\E o \in Offsets : Accept(c, o) \/ Release(c, o) \/ Reject(c, o))
LiveSpec == Spec /\ Fairness

-----------------------------------------------------------------------------
(* The refinement mapping: Kafka's share partition, as the Redis state says it is *)

KState(o) ==
    IF o >= end THEN "AVAILABLE"
    ELSE IF Pending(o) THEN
        IF o < logStart THEN "ARCHIVED"
        ELSE IF Live(o) THEN "ACQUIRED"
        ELSE IF pel[o].count >= Limit THEN "ARCHIVED"
        ELSE "AVAILABLE"
    ELSE IF fate[o].state # "none" THEN fate[o].state
    ELSE IF o < logStart \/ o <= lastId THEN "ARCHIVED"   \* trimmed unread; or gone
    ELSE "AVAILABLE"

KTerminal(o) == KState(o) \in {"ACKNOWLEDGED", "ARCHIVED"}

Kafka == INSTANCE SharePartition WITH
    state <- [o \in Offsets |-> KState(o)],
    owner <- [o \in Offsets |-> IF KState(o) = "ACQUIRED" THEN pel[o].owner ELSE NoOwner],
    left <- [o \in Offsets |-> IF KState(o) = "ACQUIRED" THEN LockTime - pel[o].idle ELSE 0],
    count <- [o \in Offsets |-> IF Pending(o) THEN pel[o].count ELSE fate[o].count],
    spso <- Min({o \in logStart..end : o = end \/ ~KTerminal(o)})

\* Every step of the Redis design is a step of Kafka's share partition (or none): the
\* step part of Kafka!Spec, named so that TLC names it when violated; its initial part,
\* RefinesInit, is a property of its own (TLC names neither part of Kafka!Spec by name; a
\* model checking one property has it named by `korvet spec check`).
Refines == [][Kafka!Next]_Kafka!vars
RefinesInit == Kafka!Init

\* Under fair consumers and a fair broker every record becomes terminal, as Kafka's.
AllDone == Kafka!AllDone

-----------------------------------------------------------------------------
(* Invariants of the Redis state itself *)

TypeOK ==
    /\ end \in 0..MaxRecords /\ logStart \in 0..end /\ lastId \in -1..(end - 1)
    /\ pel \in [Offsets -> [owner : Consumers \cup {Park, NoOwner}, idle : 0..LockTime,
                            count : Nat]]
    /\ hold \in [Consumers -> [Offsets -> -1..LockTime]]
    /\ fate \in [Offsets -> [state : {"none", "ACKNOWLEDGED", "ARCHIVED"}, count : Nat]]
    /\ trims \in 0..MaxTrims /\ closes \in 0..MaxCloses

\* The PEL holds only delivered entries, each delivered at least once and at most Limit
\* times (the delivery count never exceeds the limit), and a parked entry is claimable.
PelConsistent ==
    \A o \in Offsets :
        Pending(o) =>
            /\ o <= lastId
            /\ pel[o].count \in 1..Limit
            /\ pel[o].owner = Park => pel[o].idle = LockTime /\ pel[o].count < Limit
=============================================================================
