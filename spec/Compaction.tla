------------------------------ MODULE Compaction ------------------------------
(***************************************************************************)
(* Log compaction (issue 34): a cleaner that keeps the latest value of     *)
(* every key of a compacted topic's partition, run in chunks, each one     *)
(* atomic Lua call, interleaved with appends, fetches, retention,          *)
(* DeleteRecords and transactions. Written before the code; the design it *)
(* fixes is docs/spec/compaction.md.                                       *)
(*                                                                         *)
(* A companion of DenseLog.tla (the `dense` scheme, the default for new    *)
(* topics): offsets count records, an entry holds one record (Format       *)
(* "records") or one producer batch at its first offset ("batches"). The  *)
(* cleaner only ever removes records and keeps every survivor's offset, so *)
(* under the `time` scheme (PartitionLog.tla's sparse ids) the same rules *)
(* hold over ids; the offset arithmetic, retention's time index and Redis *)
(* restarts are those specs' and are left out here.                        *)
(*                                                                         *)
(* The cleaner is Kafka's (Cleaner.java), in Korvet's shape: a pass fixes  *)
(* the first uncleanable offset `upto` (the active segment, the            *)
(* min.compaction.lag.ms head, the last stable offset), builds the offset *)
(* map key -> latest offset over the dirty section in chunks, then copies *)
(* the stream in chunks into a new key with every survivor's original id  *)
(* (a batch rewritten with its surviving records, each at its own offset),*)
(* and swaps it in (RENAME) in a last bounded call that copies the rest,  *)
(* drops what retention or DeleteRecords removed meanwhile and keeps the   *)
(* last id. Readers see the old key until the swap, the new one after.    *)
(* A tombstone's (or marker's) delete horizon is the time of the swap      *)
(* that first made it the key's visible latest, plus delete.retention.ms. *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets, TLC

CONSTANTS
    Format,          \* "records" (an entry per record) or "batches" (an entry per batch)
    Policy,          \* cleanup.policy: "compact" or "compact,delete"
    Keys,            \* the record keys
    NoKey,           \* a keyless record (refused: INVALID_RECORD)
    Keyless,         \* do producers send keyless records?
    MaxBatch,        \* records per append 1..MaxBatch
    MaxAppends,      \* appends (accepted or refused) in a behaviour
    AppendBy,        \* producers write while the clock is at most this
    MaxClock,        \* the clock runs 0..MaxClock
    MinLag,          \* min.compaction.lag.ms, in ticks
    MaxLag,          \* max.compaction.lag.ms, in ticks
    SegMs,           \* segment.ms, in ticks: the active segment rolls at min(segment.ms, max lag)
    SegRecords,      \* segment.bytes, counted in records
    MinDirty,        \* min.cleanable.dirty.ratio, in percent
    DeleteRetention, \* delete.retention.ms, in ticks
    RetentionMs,     \* retention.ms, in ticks (compact,delete; 0: none)
    DeleteTo,        \* offsets DeleteRecords may be asked to move the log start to
    Chunk,           \* entries one cleaner call reads at most
    MaxAbandons,     \* passes a dying cleaner leaves half done
    Txns,            \* transactions the one transactional producer runs (0: none)
    MaxReads,        \* reads of the whole log from its start (0: no reader)
    FetchCount       \* entries a fetch returns at most

ASSUME /\ Format \in {"records", "batches"} /\ Policy \in {"compact", "compact,delete"}
       /\ NoKey \notin Keys /\ Keyless \in BOOLEAN /\ MaxBatch \in Nat \ {0} /\ MaxAppends \in Nat
       /\ AppendBy \in Nat /\ MaxClock \in Nat /\ MinLag \in Nat /\ MaxLag \in Nat
       /\ MinLag <= MaxLag /\ SegMs \in Nat /\ SegRecords \in Nat \ {0}
       /\ MinDirty \in 0..100 /\ DeleteRetention \in Nat /\ RetentionMs \in Nat
       /\ DeleteTo \subseteq Nat /\ Chunk \in Nat \ {0} /\ MaxAbandons \in Nat
       /\ Txns \in Nat /\ MaxReads \in Nat /\ FetchCount \in Nat \ {0}

Max(a, b) == IF a > b THEN a ELSE b
Min(a, b) == IF a < b THEN a ELSE b
MaxOf(S) == CHOOSE x \in S : \A y \in S : y <= x
MinOf(S) == CHOOSE x \in S : \A y \in S : x <= y
MaxOff == MaxAppends * MaxBatch - 1
\* No delete horizon yet; "pending": first cleaned, the horizon is the next swap's time.
NoHorizon == -1
Pending == -2

VARIABLES
    hist,      \* ghost: every record appended, offset o at hist[o + 1]:
               \* [key, tomb, ctl (a transaction marker), x (its transaction, 0: none), t, b
               \* (the first offset of its batch)]. Len(hist) is the high watermark (meta last+1)
    stream,    \* the partition's stream: <<[id, recs]>>, each record [off, key, tomb, ctl, x, v,
               \* t, dh]: v is its value (the offset it was written at: the payload's identity),
               \* dh its delete horizon (NoHorizon, Pending, or a time)
    start,     \* the log start offset (meta `start`)
    seg,       \* the active segment: [base, t] (meta): its first offset, the time of its first
               \* record (-1: empty)
    cleanedTo, \* the cleaner's checkpoint (meta): offsets below it were cleaned
    lastSwap,  \* the time of the last swap (meta; -1: none)
    cl,        \* the cleaner's pass: [phase ("idle", "map", "copy"), upto, cur, map]
    new,       \* the new key the pass copies into (same slot)
    txn,       \* the transactional producer: [n (transactions begun), open (first offset of
               \* the open one, -1: none), fate (per transaction: "open", "COMMIT", "ABORT")]
    aborted,   \* the aborted index: transactions whose ABORT marker is in the log
    hz,        \* ghost: the delete horizon each tombstone or marker was given (-1: none)
    clock,
    appends, abandons,
    rd,        \* the reader: [st ("idle", "reading", "done"), pos, from (the log start when it
               \* began), t0 (the time), map (key -> value), seen (the last fetch's records),
               \* end (where it ended), inTime (it ended within delete.retention.ms)]
    reads

vars == <<hist, stream, start, seg, cleanedTo, lastSwap, cl, new, txn, aborted, hz, clock,
          appends, abandons, rd, reads>>

HW == Len(hist)
LSO == IF txn.open = -1 THEN HW ELSE txn.open
NoMap == [k \in Keys |-> -1]
NoPass == [phase |-> "idle", upto |-> 0, cur |-> 0, map |-> NoMap]
NoRead == [st |-> "idle", pos |-> 0, from |-> 0, t0 |-> 0, map |-> NoMap, seen |-> <<>>,
           end |-> 0, inTime |-> FALSE]

Init ==
    /\ hist = <<>> /\ stream = <<>> /\ start = 0 /\ seg = [base |-> 0, t |-> -1]
    /\ cleanedTo = 0 /\ lastSwap = -1 /\ cl = NoPass /\ new = <<>>
    /\ txn = [n |-> 0, open |-> -1, fate |-> [x \in 1..Txns |-> "open"]]
    /\ aborted = {} /\ hz = [o \in 0..MaxOff |-> -1] /\ clock = 0
    /\ appends = 0 /\ abandons = 0 /\ rd = NoRead /\ reads = 0

-----------------------------------------------------------------------------
(* Reading the log *)

RecsOf(s) == UNION {{s[i].recs[j] : j \in DOMAIN s[i].recs} : i \in DOMAIN s}
Present(o) == \E r \in RecsOf(stream) : r.off = o
Rec(o) == hist[o + 1]
\* A record that is part of the key -> value map: a plain or committed keyed record.
Counts(o) == ~Rec(o).ctl /\ (Rec(o).x = 0 \/ txn.fate[Rec(o).x] = "COMMIT")
Superseded(o) == Counts(o) /\ \E s \in (o + 1)..(HW - 1) : Counts(s) /\ Rec(s).key = Rec(o).key
AbortedData(o) == ~Rec(o).ctl /\ Rec(o).x # 0 /\ txn.fate[Rec(o).x] = "ABORT"
PastHorizon(o) == hz[o] >= 0 /\ clock >= hz[o]

\* The head: the active segment, the records younger than min.compaction.lag.ms, and what
\* an open transaction holds (from the LSO on) are never cleaned.
Young == {o \in 0..(HW - 1) : Rec(o).t > clock - MinLag}
HeadStart == Min(Min(seg.base, IF Young = {} THEN HW ELSE MinOf(Young)), LSO)

\* The key -> value map of the log's records in [from, to): the latest value of each key
\* (its offset), -1 for none or a tombstone.
HistMap(from, to) ==
    [k \in Keys |-> LET os == {o \in from..(to - 1) : Counts(o) /\ Rec(o).key = k}
                    IN  IF os = {} THEN -1
                        ELSE IF Rec(MaxOf(os)).tomb THEN -1 ELSE MaxOf(os)]

-----------------------------------------------------------------------------
(* Producers: append.lua, one atomic call per batch *)

\* n records of key/tombstone choices ks, in transaction x (0: none), or a marker (ctl).
Write(ks, x, ctl) ==
    LET n     == Len(ks)
        first == HW
        recs  == [i \in 1..n |-> [key |-> ks[i][1], tomb |-> ks[i][2], ctl |-> ctl, x |-> x,
                                  t |-> clock, b |-> first]]
        srecs == [i \in 1..n |-> [off |-> first + i - 1, key |-> ks[i][1], tomb |-> ks[i][2],
                                  ctl |-> ctl, x |-> x, v |-> first + i - 1, t |-> clock,
                                  dh |-> NoHorizon]]
        ents  == IF Format = "records"
                   THEN [i \in 1..n |-> [id |-> first + i - 1, recs |-> <<srecs[i]>>]]
                   ELSE <<[id |-> first, recs |-> srecs]>>
        empty == seg.base = HW
        \* the active segment rolls on append at segment.bytes or min(segment.ms, max lag)
        roll  == ~empty /\ (HW - seg.base >= SegRecords \/ clock - seg.t >= Min(SegMs, MaxLag))
    IN  /\ hist' = hist \o recs
        /\ stream' = stream \o ents
        /\ seg' = IF empty \/ roll THEN [base |-> first, t |-> clock] ELSE seg

\* A produce: keyless records on a compacted topic are refused whole (INVALID_RECORD, as
\* Kafka's LogValidator answers), and nothing is written.
Produce ==
    /\ appends < MaxAppends /\ clock <= AppendBy /\ txn.open = -1
    /\ \E n \in 1..MaxBatch :
         \E ks \in [1..n -> (Keys \cup (IF Keyless THEN {NoKey} ELSE {})) \X BOOLEAN] :
           IF \E i \in 1..n : ks[i][1] = NoKey
             THEN UNCHANGED <<hist, stream, seg>>
             ELSE Write(ks, 0, FALSE)
    /\ appends' = appends + 1
    /\ UNCHANGED <<start, cleanedTo, lastSwap, cl, new, txn, aborted, hz, clock, abandons, rd,
                   reads>>

\* The transactional producer writes in its transaction (beginning one if none is open).
TxnAppend ==
    /\ appends < MaxAppends /\ clock <= AppendBy
    /\ txn.open # -1 \/ txn.n < Txns
    /\ \E k \in Keys, tomb \in BOOLEAN :
         LET x == IF txn.open = -1 THEN txn.n + 1 ELSE txn.n
         IN  /\ Write(<<<<k, tomb>>>>, x, FALSE)
             /\ txn' = IF txn.open = -1 THEN [txn EXCEPT !.n = x, !.open = HW] ELSE txn
    /\ appends' = appends + 1
    /\ UNCHANGED <<start, cleanedTo, lastSwap, cl, new, aborted, hz, clock, abandons, rd, reads>>

\* The marker script: the COMMIT or ABORT marker at the next offset; an abort enters the
\* aborted index.
TxnEnd ==
    /\ txn.open # -1
    /\ \E r \in {"COMMIT", "ABORT"} :
         /\ Write(<<<<NoKey, FALSE>>>>, txn.n, TRUE)
         /\ txn' = [txn EXCEPT !.open = -1, !.fate[txn.n] = r]
         /\ aborted' = IF r = "ABORT" THEN aborted \cup {txn.n} ELSE aborted
    /\ UNCHANGED <<start, cleanedTo, lastSwap, cl, new, hz, clock, appends, abandons, rd, reads>>

Tick ==
    /\ clock < MaxClock
    /\ clock' = clock + 1
    /\ UNCHANGED <<hist, stream, start, seg, cleanedTo, lastSwap, cl, new, txn, aborted, hz,
                   appends, abandons, rd, reads>>

-----------------------------------------------------------------------------
(* Retention and DeleteRecords: only under cleanup.policy=compact,delete (on a pure *)
(* `compact` topic Kafka answers DeleteRecords with POLICY_VIOLATION, and retention does *)
(* not apply). *)

LastOff(e) == e.recs[Len(e.recs)].off
KeepFrom(s, o) == SelectSeq(s, LAMBDA e : LastOff(e) >= o)

\* retention.ms: the leading entries whose records are all older than the cutoff go; the
\* log start moves to the first record left (the high watermark if none).
RECURSIVE OldPrefix(_, _)
OldPrefix(s, cutoff) ==
    IF s = <<>> THEN 0
    ELSE IF \A j \in DOMAIN Head(s).recs : Head(s).recs[j].t < cutoff
           THEN 1 + OldPrefix(Tail(s), cutoff) ELSE 0

Retain ==
    /\ Policy = "compact,delete" /\ RetentionMs > 0
    /\ LET k == OldPrefix(stream, clock - RetentionMs)
           s == SubSeq(stream, k + 1, Len(stream))
       IN  /\ k > 0
           /\ stream' = s
           /\ start' = Max(start, IF s = <<>> THEN HW ELSE s[1].recs[1].off)
    /\ aborted' = {x \in aborted : \E o \in start'..(HW - 1) : Rec(o).x = x}
    /\ UNCHANGED <<hist, seg, cleanedTo, lastSwap, cl, new, txn, hz, clock, appends, abandons,
                   rd, reads>>

\* DeleteRecords(o), up to the high watermark: an entry holding a record at or after o stays.
DeleteRecords ==
    /\ Policy = "compact,delete"
    /\ \E o \in DeleteTo :
         /\ start < o /\ o <= HW
         /\ start' = o
         /\ stream' = KeepFrom(stream, o)
    /\ aborted' = {x \in aborted : \E o \in start'..(HW - 1) : Rec(o).x = x}
    /\ UNCHANGED <<hist, seg, cleanedTo, lastSwap, cl, new, txn, hz, clock, appends, abandons,
                   rd, reads>>

-----------------------------------------------------------------------------
(* The cleaner: one pass is Begin, map chunks, copy chunks and a swap, each one atomic *)
(* call on the partition's slot; anything else may run between two calls.            *)

\* Korvet's active segment is a number in the meta hash: the cleaner rolls it once it is
\* older than min(segment.ms, max.compaction.lag.ms), appends or not (Kafka rolls only on
\* append, so its last segment is never cleaned once writes stop).
Roll ==
    /\ seg.base < HW /\ clock - seg.t >= Min(SegMs, MaxLag)
    /\ seg' = [base |-> HW, t |-> -1]
    /\ UNCHANGED <<hist, stream, start, cleanedTo, lastSwap, cl, new, txn, aborted, hz, clock,
                   appends, abandons, rd, reads>>

\* The surviving records of [lo, hi).
Between(lo, hi) == {r \in RecsOf(stream) : lo <= r.off /\ r.off < hi}

\* A pass starts when the dirty section (from the checkpoint to the first uncleanable
\* offset) holds more than min.cleanable.dirty.ratio of the cleanable log, or has been dirty
\* longer than max.compaction.lag.ms (Kafka's LogCleanerManager).
Begin ==
    /\ cl.phase = "idle"
    /\ LET upto  == HeadStart
           from  == Max(cleanedTo, start)
           dirty == Between(from, upto)
           clean == Between(start, Min(from, upto))
       IN  /\ dirty # {}
           /\ \/ Cardinality(dirty) * 100 > MinDirty * (Cardinality(dirty) + Cardinality(clean))
              \/ \E r \in dirty : r.t + MaxLag <= clock
           /\ cl' = [phase |-> "map", upto |-> upto, cur |-> from, map |-> NoMap]
    /\ new' = <<>>
    /\ UNCHANGED <<hist, stream, start, seg, cleanedTo, lastSwap, txn, aborted, hz, clock,
                   appends, abandons, rd, reads>>

\* A map chunk: the next Chunk entries holding dirty records; each plain or committed record
\* sets its key's latest offset (aborted data, markers: the aborted index says which, are not
\* values). With none left, the copy starts.
InMap(r) == cl.cur <= r.off /\ r.off < cl.upto /\ ~r.ctl /\ r.x \notin aborted
MapChunk ==
    /\ cl.phase = "map"
    /\ LET es == SelectSeq(stream, LAMBDA e : \E j \in DOMAIN e.recs : InMap(e.recs[j]))
           c  == SubSeq(es, 1, Min(Chunk, Len(es)))
           rs == RecsOf(c)
           in == {r \in rs : InMap(r)}
       IN  IF es = <<>>
             THEN cl' = [cl EXCEPT !.phase = "copy", !.cur = 0]
             ELSE cl' = [cl EXCEPT !.map = [k \in Keys |->
                                     LET os == {r.off : r \in {q \in in : q.key = k}}
                                     IN  IF os = {} THEN @[k] ELSE Max(@[k], MaxOf(os))],
                                   !.cur = MaxOf({r.off : r \in in}) + 1]
    /\ UNCHANGED <<hist, stream, start, seg, cleanedTo, lastSwap, new, txn, aborted, hz, clock,
                   appends, abandons, rd, reads>>

\* What the copy keeps of a record (Kafka's shouldRetainRecord): all of the head; below it
\* a value only if it is its key's latest; aborted data never; a tombstone or a marker until
\* its delete horizon has passed (its first clean makes it Pending: the horizon is fixed at
\* the next pass, from the time of the swap that made it visible as the latest).
FirstHorizon == Pending
Horizon(r) == IF r.dh = Pending THEN lastSwap + DeleteRetention ELSE r.dh
Keep(r) ==
    \/ r.off >= cl.upto
    \/ /\ ~(r.x # 0 /\ r.x \in aborted /\ ~r.ctl)
       /\ ~r.ctl => cl.map[r.key] <= r.off
       /\ (r.tomb \/ r.ctl) => (r.dh = NoHorizon \/ clock < Horizon(r))
Mark(r) ==
    IF r.off < cl.upto /\ (r.tomb \/ r.ctl)
      THEN [r EXCEPT !.dh = IF r.dh = NoHorizon THEN FirstHorizon ELSE Horizon(r)]
      ELSE r
\* The entries rewritten: each keeps its id with its surviving records; an empty one goes.
Rewrite(es) ==
    LET kept(e) == LET ks == SelectSeq(e.recs, Keep) IN [j \in DOMAIN ks |-> Mark(ks[j])]
        all == [i \in DOMAIN es |-> [id |-> es[i].id, recs |-> kept(es[i])]]
    IN  SelectSeq(all, LAMBDA e : e.recs # <<>>)
\* The horizons a rewrite gives or goes by, removing the record or not (ghost).
Horizons(es) ==
    LET rs == {r \in {Mark(q) : q \in RecsOf(es)} : r.dh >= 0}
    IN  [o \in 0..MaxOff |-> IF \E r \in rs : r.off = o
                             THEN (CHOOSE r \in rs : r.off = o).dh ELSE hz[o]]

Rest == SelectSeq(stream, LAMBDA e : e.id >= cl.cur)

\* A copy chunk: the next Chunk entries of the stream (from the cursor; retention may have
\* removed some meanwhile) rewritten into the new key, their ids kept (XADD with the id).
CopyChunk ==
    /\ cl.phase = "copy"
    /\ Len(Rest) > Chunk
    /\ LET c == SubSeq(Rest, 1, Chunk)
       IN  /\ new' = new \o Rewrite(c)
           /\ hz' = Horizons(c)
           /\ cl' = [cl EXCEPT !.cur = c[Chunk].id + 1]
    /\ UNCHANGED <<hist, stream, start, seg, cleanedTo, lastSwap, txn, aborted, clock, appends,
                   abandons, rd, reads>>

\* The swap, when at most Chunk entries are left: they are rewritten too, the entries
\* retention or DeleteRecords removed during the pass are dropped (XTRIM MINID at the log
\* start), XSETID keeps the last id, RENAME puts the new key in place; the checkpoint moves
\* to `upto`; the aborted index forgets transactions whose data and marker are gone.
Swap ==
    /\ cl.phase = "copy"
    /\ Len(Rest) <= Chunk
    /\ LET s == KeepFrom(new \o Rewrite(Rest), start)
       IN  /\ stream' = s
           /\ aborted' = {x \in aborted : \E r \in RecsOf(s) : r.x = x}
    /\ hz' = Horizons(Rest)
    /\ cleanedTo' = cl.upto
    /\ lastSwap' = clock
    /\ cl' = NoPass /\ new' = <<>>
    /\ UNCHANGED <<hist, start, seg, txn, clock, appends, abandons, rd, reads>>

\* The cleaner's broker dies mid-pass: the next pass deletes the half-built key.
Abandon ==
    /\ cl.phase # "idle" /\ abandons < MaxAbandons
    /\ cl' = NoPass /\ new' = <<>>
    /\ abandons' = abandons + 1
    /\ UNCHANGED <<hist, stream, start, seg, cleanedTo, lastSwap, txn, aborted, hz, clock,
                   appends, rd, reads>>

CleanerStep == Begin \/ MapChunk \/ CopyChunk \/ Swap

-----------------------------------------------------------------------------
(* A reader of the whole log (a Streams restore, a Connect worker reading its topics): *)
(* read_committed, from the log start to the end (the LSO), as Kafka's consumer reads.  *)

RUNCHANGED == <<hist, stream, start, seg, cleanedTo, lastSwap, cl, new, txn, aborted, hz,
                clock, appends, abandons>>

ReadStart ==
    /\ rd.st # "reading" /\ reads < MaxReads
    /\ rd' = [NoRead EXCEPT !.st = "reading", !.pos = start, !.from = start, !.t0 = clock]
    /\ reads' = reads + 1
    /\ UNCHANGED RUNCHANGED

\* A fetch at pos (one atomic read: bounds, the aborted list and the entries), and the
\* client taking it: the first FetchCount entries holding a record at or after pos (in the
\* batches format the entry holding pos, found by XREVRANGE, may hold only earlier records
\* now: it is passed over), each record at its own offset; aborted data and markers are
\* not applied (the client drops them with the aborted list); each record sets its key's
\* value, a tombstone removes it. Nothing left below the LSO: an empty batch up to it (as
\* Kafka keeps the last batch of a cleaning round), so the position reaches the end. At
\* the end the read is done; below the log start it failed (OFFSET_OUT_OF_RANGE). The
\* reader's map is its own, so a response taken later (a read-ahead's prepared response,
\* a slow consumer) is this fetch with a later end: it needs no step of its own.
\* An entry's records as a fetch returns them: each at its own offset (a rewritten batch
\* keeps its records' offset deltas).
Numbered(e) == e.recs
RECURSIVE Flat(_)
Flat(s) == IF s = <<>> THEN <<>> ELSE Numbered(Head(s)) \o Flat(Tail(s))
RECURSIVE Apply(_, _)
Apply(m, g) ==
    IF g = <<>> THEN m
    ELSE Apply([m EXCEPT ![Head(g).key] = IF Head(g).tomb THEN -1 ELSE Head(g).v], Tail(g))
Fetch ==
    /\ rd.st = "reading"
    /\ IF rd.pos < start
         THEN rd' = NoRead
         ELSE IF rd.pos >= LSO
           THEN rd' = [rd EXCEPT !.st = "done", !.end = rd.pos, !.seen = <<>>,
                                 !.inTime = clock - rd.t0 < DeleteRetention]
           ELSE LET es   == SelectSeq(stream, LAMBDA e : LastOff(e) >= rd.pos)
                    c    == SubSeq(es, 1, Min(FetchCount, Len(es)))
                    flat == SelectSeq(Flat(c), LAMBDA r : rd.pos <= r.off /\ r.off < LSO)
                    got  == SelectSeq(flat, LAMBDA r : ~r.ctl /\ r.x \notin aborted)
                IN  rd' = [rd EXCEPT !.seen = flat, !.map = Apply(rd.map, got),
                                     !.pos = IF flat = <<>> THEN LSO ELSE flat[Len(flat)].off + 1]
    /\ UNCHANGED <<RUNCHANGED, reads>>

Next ==
    \/ Produce \/ TxnAppend \/ TxnEnd \/ Tick \/ Retain \/ DeleteRecords
    \/ Roll \/ Begin \/ MapChunk \/ CopyChunk \/ Swap \/ Abandon
    \/ ReadStart \/ Fetch

Spec == Init /\ [][Next]_vars

\* The cleaner runs (its backoff is finite) and time passes; producers, readers, retention
\* and DeleteRecords need no fairness.
Fairness == WF_vars(Tick) /\ WF_vars(Roll) /\ WF_vars(CleanerStep)
LiveSpec == Spec /\ Fairness

-----------------------------------------------------------------------------
(* Invariants *)

TypeOK ==
    /\ start \in 0..HW /\ cleanedTo \in 0..HW /\ seg.base \in 0..HW
    /\ clock \in 0..MaxClock /\ appends \in 0..MaxAppends
    /\ cl.phase \in {"idle", "map", "copy"} /\ cl.upto \in 0..HW
    /\ \A r \in RecsOf(stream) \cup RecsOf(new) :
         /\ r.off \in 0..(HW - 1) /\ r.key \in Keys \cup {NoKey} /\ r.tomb \in BOOLEAN
         /\ r.dh \in {NoHorizon, Pending} \cup Nat
    /\ rd.st \in {"idle", "reading", "done"} /\ rd.pos \in 0..HW

(* Offsets never change: every record in the stream is the one appended at its offset,   *)
(* with its value, in the entry of the batch it was appended in (the entry id kept); ids *)
(* and offsets increase along the stream.                                                 *)
OffsetsStable ==
    /\ \A i \in DOMAIN stream :
         /\ stream[i].recs # <<>>
         /\ i > 1 => LastOff(stream[i - 1]) < stream[i].id
         /\ \A j \in DOMAIN stream[i].recs :
              LET r == stream[i].recs[j]
              IN  /\ r.v = r.off
                  /\ r.key = Rec(r.off).key /\ r.tomb = Rec(r.off).tomb /\ r.x = Rec(r.off).x
                  /\ stream[i].id = Rec(r.off).b
                  /\ j > 1 => stream[i].recs[j - 1].off < r.off

(* What retention and DeleteRecords removed stays removed: no entry lies wholly below the *)
(* log start (a swap does not bring back what was removed during its pass).              *)
NothingBelowStart == \A i \in DOMAIN stream : LastOff(stream[i]) >= start

(* Kafka's guarantee: the latest value of every key (from the log start, plain or        *)
(* committed) is kept, unless it is a tombstone whose delete horizon has passed.          *)
Symmetry == Permutations(Keys)

LatestPerKeyKept ==
    \A k \in Keys :
        LET os == {o \in start..(HW - 1) : Counts(o) /\ Rec(o).key = k}
        IN  os # {} => LET l == MaxOf(os) IN Present(l) \/ (Rec(l).tomb /\ PastHorizon(l))

(* Nothing in the head is removed: the active segment, the records younger than          *)
(* min.compaction.lag.ms, anything from the last stable offset on.                        *)
HeadUntouched == \A o \in Max(start, HeadStart)..(HW - 1) : Present(o)

(* A compacted topic holds keyed records only (and transaction markers). *)
KeyedOnly == \A r \in RecsOf(stream) : r.ctl \/ r.key \in Keys

(* A reader that starts at the log start and reaches the end within delete.retention.ms   *)
(* ends with the key -> value map of the whole log (every tombstone seen).                *)
ReaderSeesFinalState ==
    (rd.st = "done" /\ rd.inTime) => rd.map = HistMap(rd.from, rd.end)

(* A fetch from any offset, a removed one too, returns first the next surviving record,   *)
(* then the ones after it, none skipped, each at its offset with its value.               *)
(* (A fetch is the reader's only step that leaves it reading and changes it.)            *)
Survivor(r) == \E q \in RecsOf(stream) : q.off = r.off /\ q.key = r.key /\ q.tomb = r.tomb
                                         /\ q.v = r.v
FetchNextSurvivor ==
    [][(rd.st = "reading" /\ rd'.st = "reading" /\ rd' # rd) =>
         LET g == rd.seen' IN
         /\ (\E q \in RecsOf(stream) : rd.pos <= q.off /\ q.off < LSO) => g # <<>>
         /\ \A i \in DOMAIN g :
              /\ Survivor(g[i]) /\ g[i].off >= rd.pos
              /\ \A q \in RecsOf(stream) :
                   rd.pos <= q.off /\ q.off <= g[i].off => \E j \in 1..i : g[j].off = q.off
    ]_vars

(* The log start moves only by retention or DeleteRecords, and never on a pure `compact` *)
(* topic: the cleaner never moves it (kfake's cleaner does).                               *)
LogStartMovesOnlyByRetention ==
    [][start' # start => Policy = "compact,delete" /\ (Retain \/ DeleteRecords)]_vars

(* Liveness, under Fairness: with max.compaction.lag.ms, every superseded record is       *)
(* eventually removed (once the producers stop).                                           *)
EventuallyCompacted == <>[](\A o \in 0..(HW - 1) : Present(o) => ~Superseded(o))
=============================================================================
