--------------------------- MODULE SharePartition ---------------------------
(***************************************************************************)
(* Kafka's share partition (KIP-932, "queues for Kafka"): one share group *)
(* consuming one partition, as the partition's leader keeps it (issue 33). *)
(* The Redis design that is to implement it, spec/SharePartitionRedis.tla, *)
(* is checked against this module by a refinement mapping; the design and *)
(* the argument are in docs/spec/share-groups.md.                          *)
(*                                                                         *)
(* Every record of the partition is in one of Kafka's states: AVAILABLE,   *)
(* ACQUIRED (by one consumer, under an acquisition lock that expires),    *)
(* ACKNOWLEDGED or ARCHIVED (both terminal). A share consumer owns no      *)
(* position: the broker hands each fetch the lowest AVAILABLE records at  *)
(* or above the share-partition start offset (SPSO), counts their         *)
(* deliveries, and archives a record released or expired at the delivery *)
(* limit (group.share.delivery.count.limit). The SPSO moves over          *)
(* contiguous terminal records; retention (or DeleteRecords) moving the   *)
(* log start archives what it passes.                                     *)
(*                                                                         *)
(* Time is relative: a lock is the ticks it has left, so the clock needs  *)
(* no bound and time can pass for ever (the liveness models need that).   *)
(* Kafka's lock timer fires at the tick its lock runs out (Tick). Consumers *)
(* are share sessions: what each was handed and how long it was told its  *)
(* lock lasts (`hold`) is their view, against which the invariants speak. *)
(*                                                                         *)
(* The in-flight limit (group.share.partition.max.record.locks) counts    *)
(* ACQUIRED records, Korvet's rule: Kafka measures an offset width, which *)
(* on Korvet's sparse offsets would cover a few milliseconds of records.  *)
(***************************************************************************)
EXTENDS Integers, FiniteSets, TLC

CONSTANTS
    Consumers,    \* share sessions (a consumer's connection)
    MaxRecords,   \* records appended in a behaviour (offsets 0..MaxRecords-1)
    Limit,        \* group.share.delivery.count.limit
    LockTime,     \* group.share.record.lock.duration.ms, in ticks
    MaxInFlight,  \* group.share.partition.max.record.locks
    MaxTrims,     \* retention or DeleteRecords moves of the log start in a behaviour
    MaxCloses     \* sessions closed (connections dropped) in a behaviour

ASSUME /\ MaxRecords \in Nat /\ Limit \in Nat \ {0} /\ LockTime \in Nat \ {0}
       /\ MaxInFlight \in Nat \ {0} /\ MaxTrims \in Nat /\ MaxCloses \in Nat

Offsets == 0..(MaxRecords - 1)
NoOwner == "none"
\* No acknowledgement in this step (see `acker`).
NoAck == [c |-> NoOwner, o |-> -1]
States == {"AVAILABLE", "ACQUIRED", "ACKNOWLEDGED", "ARCHIVED"}
Terminal(s) == s \in {"ACKNOWLEDGED", "ARCHIVED"}
Min(S) == CHOOSE x \in S : \A y \in S : x <= y

VARIABLES
    end,       \* the log end offset: records 0..end-1 were appended
    logStart,  \* the log start offset (retention, DeleteRecords)
    state,     \* state[o]: record o's state (AVAILABLE for records not appended yet)
    owner,     \* owner[o]: the consumer that acquired o, NoOwner unless ACQUIRED
    left,      \* left[o]: the ticks o's acquisition lock has left (0: no lock)
    count,     \* count[o]: o's delivery count (acquisitions so far)
    spso,      \* the share-partition start offset
    hold,      \* hold[c][o]: consumer c's view: -1 not handed o, else the ticks c was
               \* told its lock has left (0: the lock ran out, c may still acknowledge)
    acker,     \* ghost: the consumer and record of this step's acknowledgement, or NoAck
    rejected,  \* ghost: the records a consumer rejected
    trims,     \* moves of the log start so far
    closes     \* sessions closed so far

vars == <<end, logStart, state, owner, left, count, spso, hold, acker, rejected, trims, closes>>

Init ==
    /\ end = 0 /\ logStart = 0
    /\ state = [o \in Offsets |-> "AVAILABLE"]
    /\ owner = [o \in Offsets |-> NoOwner]
    /\ left = [o \in Offsets |-> 0]
    /\ count = [o \in Offsets |-> 0]
    /\ spso = 0
    /\ hold = [c \in Consumers |-> [o \in Offsets |-> -1]]
    /\ acker = NoAck /\ rejected = {} /\ trims = 0 /\ closes = 0

\* The SPSO after a step that left the states `st`: from `from` over contiguous terminal
\* records, to the first that is not (or the log end).
Advance(st, from) == Min({o \in from..end : o = end \/ ~Terminal(st[o])})

\* Where a record goes when its lock ends without an acknowledgement (RELEASE, expiry, a
\* closed session): AVAILABLE again, or ARCHIVED once delivered Limit times.
Released(o) == IF count[o] >= Limit THEN "ARCHIVED" ELSE "AVAILABLE"

Acquired == {o \in Offsets : state[o] = "ACQUIRED"}
\* c holds a live lock on o, as the broker sees it.
Holds(c, o) == state[o] = "ACQUIRED" /\ owner[o] = c /\ left[o] > 0

-----------------------------------------------------------------------------
(* The partition's actions *)

\* A producer appends a record.
Append ==
    /\ end < MaxRecords
    /\ end' = end + 1
    /\ acker' = NoAck
    /\ UNCHANGED <<logStart, state, owner, left, count, spso, hold, rejected, trims, closes>>

\* ShareFetch from c: the lowest AVAILABLE record at or above the SPSO is acquired by c,
\* locked for LockTime, its delivery count raised; not while MaxInFlight records are
\* acquired. (A fetch of n records is n of these steps.)
Acquire(c) ==
    LET avail == {o \in spso..(end - 1) : state[o] = "AVAILABLE"} IN
    /\ avail # {}
    /\ Cardinality(Acquired) < MaxInFlight
    /\ LET o == Min(avail) IN
         /\ state' = [state EXCEPT ![o] = "ACQUIRED"]
         /\ owner' = [owner EXCEPT ![o] = c]
         /\ left' = [left EXCEPT ![o] = LockTime]
         /\ count' = [count EXCEPT ![o] = @ + 1]
         /\ hold' = [hold EXCEPT ![c][o] = LockTime]
    /\ acker' = NoAck
    /\ UNCHANGED <<end, logStart, spso, rejected, trims, closes>>

\* An acknowledgement (ShareAcknowledge, or one piggybacked on ShareFetch) by c of a
\* record it was handed, accepted only from the record's owner under a live lock; it
\* ends the lock with the record in state `new`.
Acknowledge(c, o, new) ==
    LET st == [state EXCEPT ![o] = new] IN
    /\ hold[c][o] >= 0
    /\ Holds(c, o)
    /\ state' = st
    /\ owner' = [owner EXCEPT ![o] = NoOwner]
    /\ left' = [left EXCEPT ![o] = 0]
    /\ hold' = [hold EXCEPT ![c][o] = -1]
    /\ spso' = Advance(st, spso)
    /\ acker' = [c |-> c, o |-> o]

\* ACCEPT: processed.
Accept(c, o) ==
    /\ Acknowledge(c, o, "ACKNOWLEDGED")
    /\ UNCHANGED <<end, logStart, count, rejected, trims, closes>>

\* RELEASE: AVAILABLE again at once (ARCHIVED at the delivery limit).
Release(c, o) ==
    /\ Acknowledge(c, o, Released(o))
    /\ UNCHANGED <<end, logStart, count, rejected, trims, closes>>

\* REJECT: never delivered again.
Reject(c, o) ==
    /\ Acknowledge(c, o, "ARCHIVED")
    /\ rejected' = rejected \cup {o}
    /\ UNCHANGED <<end, logStart, count, trims, closes>>

\* RENEW (ShareAcknowledge v2, KIP-1222): the lock starts again; the count stays.
Renew(c, o) ==
    /\ hold[c][o] >= 0
    /\ Holds(c, o)
    /\ left' = [left EXCEPT ![o] = LockTime]
    /\ hold' = [hold EXCEPT ![c][o] = LockTime]
    /\ acker' = [c |-> c, o |-> o]
    /\ UNCHANGED <<end, logStart, state, owner, count, spso, rejected, trims, closes>>

\* An acknowledgement of a record c no longer holds (its lock ran out, another consumer
\* has it, it was archived): INVALID_RECORD_STATE, nothing changes but c's view.
AckRefused(c, o) ==
    /\ hold[c][o] >= 0
    /\ ~Holds(c, o)
    /\ hold' = [hold EXCEPT ![c][o] = -1]
    /\ acker' = NoAck
    /\ UNCHANGED <<end, logStart, state, owner, left, count, spso, rejected, trims, closes>>

\* Time passes: every lock has a tick less; Kafka's timer ends each lock that runs out.
\* The consumers' views count down too (they were told the lock's duration).
Tick ==
    LET expiring == {o \in Offsets : state[o] = "ACQUIRED" /\ left[o] = 1}
        st == [o \in Offsets |-> IF o \in expiring THEN Released(o) ELSE state[o]]
    IN
    /\ state' = st
    /\ owner' = [o \in Offsets |-> IF o \in expiring THEN NoOwner ELSE owner[o]]
    /\ left' = [o \in Offsets |-> IF left[o] > 0 THEN left[o] - 1 ELSE 0]
    /\ hold' = [c \in Consumers |-> [o \in Offsets |->
                  IF hold[c][o] > 0 THEN hold[c][o] - 1 ELSE hold[c][o]]]
    /\ spso' = Advance(st, spso)
    /\ acker' = NoAck
    /\ UNCHANGED <<end, logStart, count, rejected, trims, closes>>

\* c's connection closes: its share session ends and every record it holds is released.
CloseSession(c) ==
    LET mine == {o \in Offsets : state[o] = "ACQUIRED" /\ owner[o] = c}
        st == [o \in Offsets |-> IF o \in mine THEN Released(o) ELSE state[o]]
    IN
    /\ closes < MaxCloses
    /\ state' = st
    /\ owner' = [o \in Offsets |-> IF o \in mine THEN NoOwner ELSE owner[o]]
    /\ left' = [o \in Offsets |-> IF o \in mine THEN 0 ELSE left[o]]
    /\ hold' = [hold EXCEPT ![c] = [o \in Offsets |-> -1]]
    /\ spso' = Advance(st, spso)
    /\ closes' = closes + 1
    /\ acker' = NoAck
    /\ UNCHANGED <<end, logStart, count, rejected, trims>>

\* Retention or DeleteRecords moves the log start to s: every record below it that is not
\* terminal is archived (an acquired one too: its acknowledgement will be refused), and
\* the SPSO moves up to s at least.
Retention(s) ==
    LET gone == {o \in Offsets : o < s /\ ~Terminal(state[o])}
        st == [o \in Offsets |-> IF o \in gone THEN "ARCHIVED" ELSE state[o]]
    IN
    /\ trims < MaxTrims
    /\ s \in (logStart + 1)..end
    /\ logStart' = s
    /\ state' = st
    /\ owner' = [o \in Offsets |-> IF o \in gone THEN NoOwner ELSE owner[o]]
    /\ left' = [o \in Offsets |-> IF o \in gone THEN 0 ELSE left[o]]
    /\ spso' = Advance(st, IF spso > s THEN spso ELSE s)
    /\ trims' = trims + 1
    /\ acker' = NoAck
    /\ UNCHANGED <<end, count, hold, rejected, closes>>

Next ==
    \/ Append \/ Tick
    \/ \E c \in Consumers :
         \/ Acquire(c) \/ CloseSession(c)
         \/ \E o \in Offsets :
              Accept(c, o) \/ Release(c, o) \/ Reject(c, o) \/ Renew(c, o) \/ AckRefused(c, o)
    \/ \E s \in 0..MaxRecords : Retention(s)

Spec == Init /\ [][Next]_vars

\* Fair consumers: time passes, a consumer that can fetch does, and each consumer ends
\* (ACCEPT, RELEASE or REJECT) what it holds, though it may renew it any number of
\* times before.
Fairness ==
    /\ WF_vars(Tick)
    /\ WF_vars(\E c \in Consumers : Acquire(c))
    /\ \A c \in Consumers :
         WF_vars(\E o \in Offsets : Accept(c, o) \/ Release(c, o) \/ Reject(c, o))
LiveSpec == Spec /\ Fairness

Symmetry == Permutations(Consumers)

-----------------------------------------------------------------------------
(* Invariants *)

TypeOK ==
    /\ end \in 0..MaxRecords /\ logStart \in 0..end /\ spso \in 0..end
    /\ state \in [Offsets -> States]
    /\ owner \in [Offsets -> Consumers \cup {NoOwner}]
    /\ left \in [Offsets -> 0..LockTime]
    /\ count \in [Offsets -> Nat]
    /\ hold \in [Consumers -> [Offsets -> -1..LockTime]]
    /\ rejected \subseteq Offsets
    /\ trims \in 0..MaxTrims /\ closes \in 0..MaxCloses
    \* records not appended yet are untouched
    /\ \A o \in Offsets : o >= end => state[o] = "AVAILABLE" /\ count[o] = 0

\* One owner per acquired record: no two consumers hold a live lock on one record at
\* once, each as it was told.
OneOwner ==
    \A o \in Offsets, c1, c2 \in Consumers :
        c1 # c2 => ~(hold[c1][o] > 0 /\ hold[c2][o] > 0)

\* Exactly the ACQUIRED records are locked, each by a consumer that knows it holds the
\* lock for as long as it does (a released record keeps no lock, no lock is orphaned).
LockHeldByOwner ==
    \A o \in Offsets :
        IF state[o] = "ACQUIRED"
          THEN owner[o] # NoOwner /\ left[o] > 0 /\ hold[owner[o]][o] = left[o]
          ELSE owner[o] = NoOwner /\ left[o] = 0

\* The delivery count never exceeds the limit.
CountWithinLimit == \A o \in Offsets : count[o] <= Limit

\* Every record below the SPSO is terminal, and the SPSO is within the log.
SpsoTerminal ==
    /\ logStart <= spso /\ spso <= end
    /\ \A o \in Offsets : o < spso => Terminal(state[o])

\* At least once: a record is ACKNOWLEDGED only after it was delivered.
AcceptedWasDelivered == \A o \in Offsets : state[o] = "ACKNOWLEDGED" => count[o] >= 1

\* No record lost: a record is ARCHIVED only if a consumer rejected it, it reached the
\* delivery limit, or it fell below the log start.
NothingLost ==
    \A o \in Offsets :
        o < end /\ state[o] = "ARCHIVED" => o < logStart \/ count[o] >= Limit \/ o \in rejected

\* At most MaxInFlight records are acquired.
InFlightBounded == Cardinality(Acquired) <= MaxInFlight

\* Only the owner with a live lock acknowledges: every acknowledgement the partition
\* applies is of a record ACQUIRED by the acknowledging consumer, its lock not run out.
AckOnlyByOwner ==
    [][acker' # NoAck =>
         /\ state[acker'.o] = "ACQUIRED"
         /\ owner[acker'.o] = acker'.c
         /\ left[acker'.o] > 0]_vars

\* Terminal is for ever: no record is acknowledged twice, none archived comes back.
TerminalStays == [][\A o \in Offsets : Terminal(state[o]) => state'[o] = state[o]]_vars

-----------------------------------------------------------------------------
(* Liveness, under Fairness *)

\* Every record appended eventually becomes terminal.
AllDone == \A o \in Offsets : o < end ~> Terminal(state[o])
=============================================================================
