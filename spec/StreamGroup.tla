----------------------------- MODULE StreamGroup -----------------------------
(***************************************************************************)
(* One partition (a Redis stream) consumed by a Kafka consumer group, and  *)
(* the Redis consumer group the broker keeps beside it.                    *)
(*                                                                         *)
(* The Kafka consumer owns its fetch position (seed 004): it starts at the *)
(* committed offset (or the earliest one), moves past every record a fetch *)
(* response brings it, and may seek.  A response may be lost (a timeout, a *)
(* dropped connection): the client then fetches again from the same        *)
(* position.  A rebalance hands the partition to another member, which     *)
(* starts at the committed offset.                                         *)
(*                                                                         *)
(* The broker creates the Redis consumer group lazily, at the first fetch  *)
(* of the group, at the client's fetch offset, and remembers in memory    *)
(* that it did (seed 000); a broker restart forgets that, and the next     *)
(* XGROUP CREATE fails with BUSYGROUP, which keeps the group's position.   *)
(*                                                                         *)
(* FetchBy = "XREADGROUP" is the seeds' approach: after the lazy creation  *)
(* every fetch reads XREADGROUP ... > ("entries never delivered to this    *)
(* group"), whatever offset the client asked for.  FetchBy = "XRANGE" is   *)
(* Korvet's: a fetch reads from the client's fetch offset, and the Redis   *)
(* group is only kept for observability (created lazily, moved to the     *)
(* committed offset at every commit).                                      *)
(*                                                                         *)
(* Offsets are entry ids 1..Len (the offset codec is a bijection, spec     *)
(* OffsetCodec); a position is the next offset to read.                   *)
(***************************************************************************)
EXTENDS Integers

CONSTANTS
    Clients,        \* the group's members
    MaxRecords,     \* the stream grows to at most this many records
    Batch,          \* records per fetch response
    FetchBy,        \* "XREADGROUP" (seeds 000/001) or "XRANGE" (Korvet)
    CreateAt,       \* XGROUP CREATE at the entry "before offset" or (seed 000 literally) "at offset"
    LostResponses,  \* may a fetch response be lost?
    Seeks,          \* may the client seek?
    Rebalances,     \* may the partition move to another member?
    Restarts        \* may the broker restart?

ASSUME /\ FetchBy \in {"XREADGROUP", "XRANGE"}
       /\ CreateAt \in {"before offset", "at offset"}
       /\ Batch \in Nat \ {0}
       /\ MaxRecords \in Nat

NoClient == "none"

VARIABLES
    len,          \* records in the stream: offsets 1..len
    owner,        \* the member the partition is assigned to
    pos,          \* each client's fetch position (0: it has none)
    committed,    \* the group's committed offset (0: none)
    rgExists,     \* the Redis consumer group exists on the stream
    rgLast,       \* its last-delivered-id
    initialized,  \* the broker's in-memory "group initialised" mark
    lastFetch     \* the last fetch response: what was asked, what came back

vars == <<len, owner, pos, committed, rgExists, rgLast, initialized, lastFetch>>

NoFetch == [client |-> NoClient, from |-> 0, first |-> 0, count |-> 0, end |-> 0,
            next |-> 0, delivered |-> FALSE]

Min(a, b) == IF a < b THEN a ELSE b

Init ==
    /\ len = 0
    /\ owner = CHOOSE c \in Clients : TRUE
    /\ pos = [c \in Clients |-> IF c = owner THEN 1 ELSE 0]   \* auto.offset.reset=earliest
    /\ committed = 0
    /\ rgExists = FALSE
    /\ rgLast = 0
    /\ initialized = FALSE
    /\ lastFetch = NoFetch

Produce ==
    /\ len < MaxRecords
    /\ len' = len + 1
    /\ UNCHANGED <<owner, pos, committed, rgExists, rgLast, initialized, lastFetch>>

\* The owner fetches from its position.  The broker first creates the Redis
\* group if its in-memory mark is missing (BUSYGROUP keeps an existing one),
\* then reads: XREADGROUP > (after the group's last-delivered-id, which moves)
\* or XRANGE from the fetch offset.  The response reaches the client or is lost.
Fetch(c) ==
    /\ owner = c
    /\ pos[c] > 0
    /\ LET o == pos[c]
           create == ~initialized /\ ~rgExists
           start == IF CreateAt = "at offset" THEN o ELSE o - 1
           groupAt == IF create THEN start ELSE rgLast
           first == IF FetchBy = "XREADGROUP" THEN groupAt + 1 ELSE o
           last == Min(first + Batch - 1, len)
           count == IF last >= first THEN last - first + 1 ELSE 0
       IN /\ rgExists' = (rgExists \/ create)
          /\ rgLast' = IF FetchBy = "XREADGROUP" /\ count > 0 THEN last ELSE groupAt
          /\ initialized' = TRUE
          /\ \E delivered \in IF LostResponses THEN BOOLEAN ELSE {TRUE} :
                /\ pos' = IF delivered /\ count > 0 THEN [pos EXCEPT ![c] = last + 1] ELSE pos
                /\ lastFetch' = [client |-> c, from |-> o, first |-> IF count > 0 THEN first ELSE 0,
                                 count |-> count, end |-> len, next |-> pos'[c],
                                 delivered |-> delivered]
    /\ UNCHANGED <<len, owner, committed>>

\* The owner commits its position.  Korvet also moves the Redis group there
\* (XGROUP SETID, or XGROUP CREATE if there is none yet), so XINFO GROUPS
\* shows the group's progress.
Commit(c) ==
    /\ owner = c
    /\ pos[c] > 0
    /\ committed' = pos[c]
    /\ IF FetchBy = "XRANGE"
       THEN rgExists' = TRUE /\ rgLast' = pos[c] - 1
       ELSE UNCHANGED <<rgExists, rgLast>>
    /\ UNCHANGED <<len, owner, pos, initialized, lastFetch>>

SeekTo(c, o) ==
    /\ Seeks
    /\ owner = c
    /\ pos' = [pos EXCEPT ![c] = o]
    /\ UNCHANGED <<len, owner, committed, rgExists, rgLast, initialized, lastFetch>>

\* The partition moves to member c, which starts at the committed offset
\* (OffsetFetch) or, with none, at the earliest offset.
Rebalance(c) ==
    /\ Rebalances
    /\ c # owner
    /\ owner' = c
    /\ pos' = [d \in Clients |-> IF d = c THEN (IF committed > 0 THEN committed ELSE 1) ELSE 0]
    /\ UNCHANGED <<len, committed, rgExists, rgLast, initialized, lastFetch>>

\* The broker restarts: its in-memory "initialised" mark is gone; Redis keeps the group.
Restart ==
    /\ Restarts
    /\ initialized
    /\ initialized' = FALSE
    /\ UNCHANGED <<len, owner, pos, committed, rgExists, rgLast, lastFetch>>

\* (A choice over a set that depends on the state: TLC names the step Seek.)
Seek == \E c \in Clients, o \in 1..(len + 1) : SeekTo(c, o)

Next ==
    \/ Produce
    \/ \E c \in Clients : Fetch(c) \/ Commit(c) \/ Rebalance(c)
    \/ Seek
    \/ Restart

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
TypeOK ==
    /\ len \in 0..MaxRecords
    /\ owner \in Clients
    /\ pos \in [Clients -> 0..(MaxRecords + 1)]
    /\ committed \in 0..(MaxRecords + 1)
    /\ rgExists \in BOOLEAN
    /\ rgLast \in 0..MaxRecords
    /\ initialized \in BOOLEAN
    /\ lastFetch \in [client : Clients \cup {NoClient}, from : 0..(MaxRecords + 1),
                      first : 0..MaxRecords, count : 0..Batch, end : 0..MaxRecords,
                      next : 0..(MaxRecords + 1), delivered : BOOLEAN]

\* Kafka's fetch contract, stated over the log (offsets 1..end when the fetch
\* read it) rather than over how the broker chose where to read: a response
\* that reaches the client carries records of the log at or after the offset
\* it asked for, every one of them from that offset up to where the client
\* moves on (next), and none only when the log has nothing at or after it.
\* The records in between would otherwise never be seen by this client:
\* skipped.  (The response is first..first+count-1.)
Carried(r) == lastFetch.first <= r /\ r < lastFetch.first + lastFetch.count
NoRecordSkipped ==
    lastFetch.delivered =>
        /\ \A r \in 1..lastFetch.end :
              lastFetch.from <= r /\ r < lastFetch.next => Carried(r)
        /\ \A r \in 1..lastFetch.end : Carried(r) => lastFetch.from <= r
        /\ lastFetch.count = 0 => \A r \in 1..lastFetch.end : r < lastFetch.from
        /\ lastFetch.count > 0 => lastFetch.first = lastFetch.from

\* Korvet: once an offset is committed, the Redis group shows it (its
\* last-delivered-id is the last committed record).  Two actions write the
\* group: Commit (XGROUP SETID) and a fetch's lazy XGROUP CREATE, which after
\* a broker restart must leave an existing group alone (BUSYGROUP); the
\* invariant is about the two together (mutants in spec/models.yaml).
RedisGroupAtCommit ==
    (FetchBy = "XRANGE" /\ rgExists /\ committed > 0) => rgLast = committed - 1

=============================================================================
