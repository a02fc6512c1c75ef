---------------------------- MODULE ProducerState ----------------------------
(***************************************************************************)
(* Idempotent producers on one partition: the dedupe rules of              *)
(* korvet/storage/lua/append.lua (Kafka's ProducerStateManager rules).     *)
(*                                                                         *)
(* A producer (id p, epoch e) numbers its records with sequences 0, 1, ... *)
(* and sends them in batches; at most MaxInFlight batches are unacknowl-   *)
(* edged at a time (Kafka's max.in.flight.requests.per.connection <= 5).  *)
(* The network delivers the batches in any order, a response may be lost, *)
(* and the client then retries the batch, so the broker sees reordered,    *)
(* duplicated and stale batches.  The client may bump its epoch (KIP-360), *)
(* starting again at sequence 0; batches of the old epoch may still arrive. *)
(*                                                                         *)
(* The broker keeps, per producer, the last epoch, the last sequence and   *)
(* the last CacheSize batches with their base offsets (pstate, in the     *)
(* partition's meta hash, field p:<id>).  Each delivered batch is decided  *)
(* by the one atomic append script:                                        *)
(*   epoch older than the stored one           -> BAD_EPOCH (fenced)       *)
(*   same epoch, batch among the cached ones    -> DUP (original offset)   *)
(*   same epoch, base = last sequence + 1       -> OK (appended)           *)
(*   newer epoch, base = 0                      -> OK                      *)
(*   no state for the producer                  -> OK (any sequence)       *)
(*   otherwise                                  -> OUT_OF_ORDER            *)
(* An append may carry a retention bound (MAXLEN): the log keeps its last  *)
(* k records.  SurvivesRetention says whether the producer state outlives  *)
(* the producer's records (korvet: yes, it is not in the stream; a broker  *)
(* that derives it from the log loses it with them).                       *)
(*                                                                         *)
(* MaxMoves bounds the clients' steps (new batches and epoch bumps, all     *)
(* producers together) in a behaviour, so that several producers fit a     *)
(* model whose single producer can still reach the cache bound.            *)
(*                                                                         *)
(* Offsets are 1, 2, ... in append order (the clock stands still, so the   *)
(* offset codec hands out last + 1; spec OffsetCodec covers the rest).     *)
(* Names: spec/README.md; explained in docs/spec/storage-path.md.          *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    Producers,          \* producer ids
    MaxEpoch,           \* epochs 0..MaxEpoch
    MaxBatch,           \* records per batch 1..MaxBatch
    MaxInFlight,        \* unacknowledged batches per producer
    CacheSize,          \* batches the broker remembers per producer (korvet, Kafka: 5)
    MaxLens,            \* MAXLEN bounds an append may carry (besides none, -1)
    MaxSeq,             \* a producer's sequences stay below MaxSeq (bounds the model)
    SurvivesRetention,  \* producer state outlives the producer's records
    MaxMoves            \* the clients' steps (batches and bumps) in a behaviour

\* A retention bound keeps at least the newest record (Kafka never deletes the
\* active segment; korvet's MAXLEN comes from a positive record or byte bound).
ASSUME /\ MaxEpoch \in Nat /\ MaxBatch \in Nat \ {0} /\ MaxInFlight \in Nat \ {0}
       /\ CacheSize \in Nat \ {0} /\ MaxLens \subseteq Nat \ {0} /\ MaxSeq \in Nat
       /\ SurvivesRetention \in BOOLEAN /\ MaxMoves \in Nat

NoState == [epoch |-> -1, last |-> -1, cache |-> <<>>]
NoReply == [p |-> "none", e |-> -1, base |-> -1, n |-> 0, status |-> "NONE", off |-> -1]

VARIABLES
    epoch,     \* epoch[p]: the client's current epoch
    nextSeq,   \* nextSeq[p]: the client's next sequence number
    unacked,   \* unacked[p]: the client's batches not yet acknowledged
    net,       \* batches on their way to the broker (any order; a retry re-sends)
    log,       \* the stream: <<[p, e, s, off]>>, one entry per record
    pstate,    \* pstate[p]: [epoch, last, cache: <<[first, last, off]>> newest first] or NoState
    history,   \* ghost: every batch ever appended, in order: [p, e, base, n, off]
    reply,     \* the broker's last reply: [p, e, base, n, status, off]
    moves      \* the clients' steps so far (bounds the model)

vars == <<epoch, nextSeq, unacked, net, log, pstate, history, reply, moves>>

Last(b) == b.base + b.n - 1
\* The offset after the last record appended (trimming does not change it).
NextOffset == IF history = <<>> THEN 1
              ELSE history[Len(history)].off + history[Len(history)].n

Take(s, k) == IF Len(s) <= k THEN s ELSE SubSeq(s, 1, k)
Trim(s, k) == IF k < 0 \/ Len(s) <= k THEN s ELSE SubSeq(s, Len(s) - k + 1, Len(s))

Init ==
    /\ epoch = [p \in Producers |-> 0]
    /\ nextSeq = [p \in Producers |-> 0]
    /\ unacked = [p \in Producers |-> {}]
    /\ net = {}
    /\ log = <<>>
    /\ pstate = [p \in Producers |-> NoState]
    /\ history = <<>>
    /\ reply = NoReply
    /\ moves = 0

(* The client creates its next batch of n records and sends it. *)
NewBatch(p) ==
    /\ Cardinality(unacked[p]) < MaxInFlight
    /\ moves < MaxMoves /\ moves' = moves + 1
    /\ \E n \in 1..MaxBatch :
         LET b == [p |-> p, e |-> epoch[p], base |-> nextSeq[p], n |-> n]
         IN  /\ nextSeq[p] + n <= MaxSeq
             /\ nextSeq' = [nextSeq EXCEPT ![p] = nextSeq[p] + n]
             /\ unacked' = [unacked EXCEPT ![p] = @ \cup {b}]
             /\ net' = net \cup {b}
    /\ UNCHANGED <<epoch, log, pstate, history, reply>>

(* No answer came (lost, timed out, or an error): the client sends the batch again. *)
Retry(p) ==
    /\ \E b \in unacked[p] \ net : net' = net \cup {b}
    /\ UNCHANGED <<epoch, nextSeq, unacked, log, pstate, history, reply, moves>>

(* The client bumps its epoch and starts again at sequence 0, giving up *)
(* its unacknowledged batches (those on the wire may still arrive).     *)
BumpEpoch(p) ==
    /\ epoch[p] < MaxEpoch
    /\ moves < MaxMoves /\ moves' = moves + 1
    /\ epoch' = [epoch EXCEPT ![p] = @ + 1]
    /\ nextSeq' = [nextSeq EXCEPT ![p] = 0]
    /\ unacked' = [unacked EXCEPT ![p] = {}]
    /\ UNCHANGED <<net, log, pstate, history, reply>>

(* The append script's decision on batch b. *)
CachedAt(st, b) == {i \in DOMAIN st.cache : st.cache[i].first = b.base /\ st.cache[i].last = Last(b)}
Decide(st, b) ==
    IF st = NoState THEN "OK"
    ELSE IF b.e < st.epoch THEN "BAD_EPOCH"
    ELSE IF b.e = st.epoch /\ CachedAt(st, b) # {} THEN "DUP"
    ELSE IF b.e = st.epoch THEN (IF b.base = st.last + 1 THEN "OK" ELSE "OUT_OF_ORDER")
    ELSE IF b.base = 0 THEN "OK" ELSE "OUT_OF_ORDER"

NewState(st, b, off) ==
    [epoch |-> b.e, last |-> Last(b),
     cache |-> Take(<<[first |-> b.base, last |-> Last(b), off |-> off]>>
                    \o (IF st # NoState /\ st.epoch = b.e THEN st.cache ELSE <<>>), CacheSize)]

HasRecords(s, p) == \E i \in DOMAIN s : s[i].p = p

(* The atomic append script runs on batch b with retention bound k; the *)
(* client hears the reply or not.                                       *)
Deliver(b, k, heard) ==
    LET st     == pstate[b.p]
        status == Decide(st, b)
        off    == NextOffset
        added  == [i \in 1..b.n |-> [p |-> b.p, e |-> b.e, s |-> b.base + i - 1, off |-> off + i - 1]]
        newLog == Trim(log \o added, k)
        kept   == [q \in Producers |->
                     IF q = b.p THEN NewState(st, b, off)
                     ELSE IF SurvivesRetention \/ HasRecords(newLog, q) THEN pstate[q]
                     ELSE NoState]
        dupOff == IF status = "DUP" THEN st.cache[CHOOSE i \in CachedAt(st, b) : TRUE].off ELSE -1
    IN  /\ net' = net \ {b}
        /\ reply' = [p |-> b.p, e |-> b.e, base |-> b.base, n |-> b.n, status |-> status,
                     off |-> IF status = "OK" THEN off ELSE dupOff]
        /\ IF status = "OK"
             THEN /\ log' = newLog
                  /\ history' = Append(history, [p |-> b.p, e |-> b.e, base |-> b.base,
                                                 n |-> b.n, off |-> off])
                  /\ pstate' = IF SurvivesRetention \/ HasRecords(newLog, b.p) THEN kept
                               ELSE [kept EXCEPT ![b.p] = NoState]
             ELSE UNCHANGED <<log, history, pstate>>
        /\ unacked' = IF heard /\ status \in {"OK", "DUP"}
                        THEN [unacked EXCEPT ![b.p] = @ \ {b}] ELSE unacked
        /\ UNCHANGED <<epoch, nextSeq, moves>>

(* The broker takes any batch off the network, with or without a retention bound. *)
Receive == \E b \in net : \E k \in {-1} \cup MaxLens : \E heard \in BOOLEAN : Deliver(b, k, heard)

Next ==
    \/ \E p \in Producers : NewBatch(p) \/ Retry(p) \/ BumpEpoch(p)
    \/ Receive

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Kafka's rules, stated over the history of appends rather than over the   *)
(* broker's summary of it (pstate): what a broker that remembered every     *)
(* batch would answer.                                                      *)

BatchesOf(p) == SelectSeq(history, LAMBDA h : h.p = p)
KafkaReply(b) ==
    LET mine == BatchesOf(b.p)
        top  == mine[Len(mine)]
        same == SelectSeq(mine, LAMBDA h : h.e = top.e)
        recent == SubSeq(same, IF Len(same) > CacheSize THEN Len(same) - CacheSize + 1 ELSE 1,
                         Len(same))
    IN  IF mine = <<>> THEN "OK"
        ELSE IF b.e < top.e THEN "BAD_EPOCH"
        ELSE IF b.e = top.e /\ \E i \in DOMAIN recent :
                   recent[i].base = b.base /\ recent[i].n = b.n THEN "DUP"
        ELSE IF b.e = top.e THEN (IF b.base = top.base + top.n THEN "OK" ELSE "OUT_OF_ORDER")
        ELSE IF b.base = 0 THEN "OK" ELSE "OUT_OF_ORDER"

(* Every reply is the one Kafka's rules give on the history so far: every   *)
(* step of the append script, a reply equal to the one before included.    *)
RepliesPerKafka ==
    [][Receive =>
         reply'.status = KafkaReply([p |-> reply'.p, e |-> reply'.e, base |-> reply'.base,
                                     n |-> reply'.n])]_vars

-----------------------------------------------------------------------------
(* Invariants *)

Batch    == [p : Producers, e : 0..MaxEpoch, base : 0..MaxSeq, n : 1..MaxBatch]
Offset   == Nat \ {0}
Record   == [p : Producers, e : 0..MaxEpoch, s : 0..(MaxSeq - 1), off : Offset]
Appended == [p : Producers, e : 0..MaxEpoch, base : 0..MaxSeq, n : 1..MaxBatch, off : Offset]
Cached   == [first : 0..(MaxSeq - 1), last : 0..(MaxSeq - 1), off : Offset]
Status   == {"NONE", "OK", "DUP", "OUT_OF_ORDER", "BAD_EPOCH"}

TypeOK ==
    /\ epoch \in [Producers -> 0..MaxEpoch]
    /\ nextSeq \in [Producers -> 0..MaxSeq]
    /\ \A p \in Producers : unacked[p] \subseteq Batch
    /\ net \subseteq Batch
    /\ log \in Seq(Record)
    /\ history \in Seq(Appended)
    /\ \A p \in Producers :
          \/ pstate[p] = NoState
          \/ /\ pstate[p] \in [epoch : 0..MaxEpoch, last : 0..(MaxSeq - 1), cache : Seq(Cached)]
             /\ 1 <= Len(pstate[p].cache) /\ Len(pstate[p].cache) <= CacheSize
    /\ \/ reply = NoReply
       \/ reply \in [p : Producers, e : 0..MaxEpoch, base : 0..MaxSeq, n : 1..MaxBatch,
                    status : Status \ {"NONE"}, off : Offset \cup {-1}]
    /\ moves \in 0..MaxMoves

(* No batch, and no record's sequence, is stored twice. *)
NoBatchStoredTwice ==
    \A i, j \in DOMAIN history :
        (i # j /\ history[i].p = history[j].p /\ history[i].e = history[j].e)
            => (Last(history[i]) < history[j].base \/ Last(history[j]) < history[i].base)

(* A DUP carries the offset the batch was first appended at. *)
DupReturnsOriginalOffsets ==
    reply.status = "DUP" =>
        \E i \in DOMAIN history :
            /\ history[i].p = reply.p /\ history[i].e = reply.e
            /\ history[i].base = reply.base /\ history[i].n = reply.n
            /\ history[i].off = reply.off

(* An OK carries the offset its records are stored at, consecutively: a     *)
(* consumer reading the log finds each of the batch's records still there  *)
(* at the offset the producer was told, and the batch's last record last   *)
(* (a retention bound keeps the newest record).  Stated against the log,   *)
(* not against the history the same step writes.                           *)
OkReturnsStoredOffsets ==
    reply.status = "OK" =>
        /\ \A i \in DOMAIN log :
              (log[i].p = reply.p /\ log[i].e = reply.e /\ log[i].s \in reply.base..Last(reply))
                  => log[i].off = reply.off + log[i].s - reply.base
        /\ log # <<>>
        /\ log[Len(log)].p = reply.p /\ log[Len(log)].e = reply.e
        /\ log[Len(log)].s = Last(reply) /\ log[Len(log)].off = reply.off + reply.n - 1

(* Fencing: once a producer's epoch e was appended, no batch of an older *)
(* epoch is; within an epoch, batches follow each other in sequence.    *)
FencedAndInSequence ==
    \A p \in Producers :
        LET mine == BatchesOf(p)
        IN  \A i \in DOMAIN mine : i > 1 =>
               \/ mine[i].e > mine[i - 1].e /\ mine[i].base = 0
               \/ mine[i].e = mine[i - 1].e /\ mine[i].base = mine[i - 1].base + mine[i - 1].n

(* What the client was told is what is stored: an acknowledged batch is  *)
(* in the history exactly once.                                          *)
AckedStoredOnce ==
    \A p \in Producers : \A s \in 0..(nextSeq[p] - 1) :
        (~\E b \in unacked[p] : s \in b.base..Last(b))
            => Cardinality({i \in DOMAIN history :
                              history[i].p = p /\ history[i].e = epoch[p]
                              /\ s \in history[i].base..Last(history[i])}) = 1

=============================================================================
