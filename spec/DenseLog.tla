------------------------------- MODULE DenseLog -------------------------------
(***************************************************************************)
(* One partition of a topic whose offsets count records (the `dense`      *)
(* offset scheme, korvet.offset.scheme): Kafka's offset contract on a     *)
(* Redis stream.                                                           *)
(*                                                                         *)
(* The keys, all in the partition's hash slot, as the append script keeps *)
(* them (korvet/storage/lua/append.lua):                                   *)
(*   stream  entries whose ids are <offset>-1: one per record (Format      *)
(*           "records"), or one per batch at its first offset ("batches")  *)
(*   meta    last (the last offset handed out), start (the log start      *)
(*           offset), epoch (the partition's leader epoch), inc (the Redis *)
(*           life that set it), epochs (<<epoch, start offset>>, in order),*)
(*           tmax (the largest record timestamp ever appended), since     *)
(*           (records appended since the last checkpoint)                  *)
(*   times   the time index: checkpoints <<end, t>>: every record with an  *)
(*           offset below `end` has a timestamp <= t; one is added when    *)
(*           Interval records were appended since the last (Kafka's        *)
(*           index.interval.bytes, counted in records here)               *)
(*                                                                         *)
(* An append reserves the n offsets last+1 .. last+n in one atomic call.   *)
(* Retention by time (an append's cutoff: now - retention.ms) removes the  *)
(* records below the end of the last checkpoint whose t is below the      *)
(* cutoff, as Kafka removes whole segments whose largest timestamp is     *)
(* older; retention by size keeps the last MaxLen entries; DeleteRecords  *)
(* moves the log start.  ListOffsets by time searches the checkpoints for *)
(* the first one whose t reaches the time asked, then reads the records   *)
(* between it and the one before (`IndexAnswer`): TLC checks that this    *)
(* is Kafka's answer, the first record at or after the log start whose    *)
(* timestamp is at or after the time (`KafkaAnswer`).                      *)
(*                                                                         *)
(* Redis may lose its last writes (RedisRestart with appendfsync          *)
(* everysec: it comes back with what was last fsynced, `disk`), and then   *)
(* hands the same offsets to new records.  The partition's epoch marks     *)
(* each history: the first write of a new Redis life bumps it, to          *)
(* Max(epoch + 1, the clock in seconds), so an epoch number lost with its  *)
(* records is never given again (Redis' restart takes the clock past the   *)
(* second of any write it lost: `ClockAfterRestart`).  A consumer tracks   *)
(* the epoch of the last record it read and validates its position as     *)
(* Kafka's clients do (KIP-320): a fetch with an older epoch than the      *)
(* partition's is fenced; the consumer then asks the end offset of its     *)
(* epoch (OffsetForLeaderEpoch) and, if its position is past it, goes back *)
(* to it.  `NoSilentSkip`: a consumer never moves past a record of the log *)
(* without having read it.  A consumer may also position at the end before *)
(* reading (`ListLatest`), keeping the epoch ListOffsets gives, 0 on a     *)
(* partition never written; `ValidationFindsAnEnd`: its validation always  *)
(* gets an end offset, never the UNDEFINED that sends it to its reset      *)
(* policy; `EndsInsideTheLog`: never one below the log start.             *)
(*                                                                         *)
(* Names: spec/README.md; explained in docs/spec/dense-offsets.md.         *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    Format,        \* "records" (an entry per record) or "batches" (an entry per batch)
    MaxBatch,      \* records per append 1..MaxBatch
    Stamps,        \* the timestamps a record may carry (any order: CreateTime)
    Interval,      \* records between two checkpoints of the time index
    Cutoffs,       \* retention cutoffs an append may apply (below every stamp: no retention.ms)
    MaxLen,        \* retention by size: entries kept (0: none)
    DeleteTo,      \* offsets DeleteRecords may be asked to move the log start to
    MaxAppends,    \* appends in a behaviour
    MaxRestarts,   \* Redis restarts in a behaviour
    MaxClock,      \* the clock (seconds) runs 0..MaxClock
    FetchCount,    \* records a fetch returns at most
    Times,         \* the times ListOffsets is asked for
    Consumer       \* is there a consumer fetching?

ASSUME /\ Format \in {"records", "batches"} /\ MaxBatch \in Nat \ {0}
       /\ Stamps \subseteq Nat /\ Interval \in Nat \ {0}
       /\ Cutoffs \subseteq Int /\ MaxLen \in Nat /\ DeleteTo \subseteq Nat
       /\ MaxAppends \in Nat /\ MaxRestarts \in Nat /\ MaxClock \in Nat
       /\ FetchCount \in Nat \ {0} /\ Times \subseteq Nat /\ Consumer \in BOOLEAN

Max(a, b) == IF a > b THEN a ELSE b
Min(a, b) == IF a < b THEN a ELSE b
MaxOf(S) == CHOOSE x \in S : \A y \in S : y <= x

VARIABLES
    stream,    \* the entries: <<[base, recs]>>, recs a sequence of [rid, ts]
    meta,      \* [last, start, epoch, inc, epochs, tmax, since]
    times,     \* the checkpoints: <<[end, t]>>
    disk,      \* what Redis last fsynced: [stream, meta, times]
    life,      \* Redis' life (bumped by each restart)
    clock,     \* the brokers' clock, in seconds
    restartedAt, \* the clock when Redis last restarted (-1: never)
    appends,   \* appends so far (record ids: appends * MaxBatch + i, unique)
    restarts,
    \* the consumer
    pos,       \* its fetch position
    base,      \* where it last (re)positioned: it reads every record from there
    got,       \* the records it read since base: offset -> record id
    lastEpoch, \* the epoch of the last record it read (-1: none)
    known,     \* the partition epoch its metadata says
    fenced     \* its last fetch was fenced: it validates its position before reading on

logVars == <<stream, meta, times>>
vars == <<stream, meta, times, disk, life, clock, restartedAt, appends, restarts,
          pos, base, got, lastEpoch, known, fenced>>

NoMeta == [last |-> -1, start |-> 0, epoch |-> -1, inc |-> -1, epochs |-> <<>>,
           tmax |-> -1, since |-> 0]

Init ==
    /\ stream = <<>> /\ meta = NoMeta /\ times = <<>>
    /\ disk = [stream |-> <<>>, meta |-> NoMeta, times |-> <<>>]
    /\ life = 0 /\ clock = 0 /\ restartedAt = -1
    /\ appends = 0 /\ restarts = 0
    /\ pos = 0 /\ base = 0 /\ got = <<>> /\ lastEpoch = -1 /\ known = -1 /\ fenced = FALSE

-----------------------------------------------------------------------------
(* Reading the log *)

HW == meta.last + 1                 \* the high watermark: the next offset
LogStart == meta.start
Last(e) == e.base + Len(e.recs) - 1  \* the last offset of an entry
\* The record at offset o (a [rid, ts]), for o in LogStart..HW-1.
Holds(e, o) == e.base <= o /\ o <= Last(e)
RecordAt(o) == LET i == CHOOSE i \in DOMAIN stream : Holds(stream[i], o)
               IN  stream[i].recs[o - stream[i].base + 1]
Present(o) == LogStart <= o /\ o < HW
\* The epochs the broker answers with: the history; before the partition's first write
\* (or once Redis lost all of it) Kafka's first epoch, 0 from offset 0, which is what the
\* broker's Metadata and ListOffsets then say (korvet/core/epochs.py NEVER_WRITTEN).
Hist == IF meta.epochs = <<>> THEN <<<<0, 0>>>> ELSE meta.epochs
CurEpoch == Hist[Len(Hist)][1]
\* The epoch a record was written in: the last epoch starting at or before it.
EpochOf(o) == LET k == MaxOf({j \in DOMAIN Hist : Hist[j][2] <= o})
              IN  Hist[k][1]
\* The history as Kafka's leader epoch cache holds it once the log start moved
\* (LeaderEpochFileCache.truncateFromStart, on every move of the log start): the epochs
\* starting after the log start, after the last one starting at or before it, which now
\* starts there.
Cache == LET below == {j \in DOMAIN Hist : Hist[j][2] <= LogStart}
         IN  IF below = {} THEN Hist
             ELSE <<<<Hist[MaxOf(below)][1], LogStart>>>>
                    \o SubSeq(Hist, MaxOf(below) + 1, Len(Hist))
\* OffsetForLeaderEpoch(e), as Kafka's LeaderEpochFileCache.endOffsetFor answers it from
\* that cache: the high watermark for the current epoch; for an older one, the start of the
\* first epoch after it (an epoch the log lost lies between two it has); for one older
\* than the first the cache has, the first's start (Kafka: "the requested epoch is smaller
\* than any known epoch"), the log start when retention or DeleteRecords removed the
\* epochs before; -1 (UNDEFINED_EPOCH_OFFSET) only for an epoch newer than the current.
EndOffset(e) ==
    IF e < 0 \/ e > CurEpoch THEN -1
    ELSE IF e = CurEpoch THEN HW
    ELSE IF e < Cache[1][1] THEN Cache[1][2]
    ELSE LET later == {j \in DOMAIN Cache : Cache[j][1] > e}
             j == CHOOSE j \in later : \A i \in later : j <= i
         IN  Cache[j][2]

\* Kafka's answer to ListOffsets for time t: the first record at or after the log start
\* whose timestamp is at or after t; -1 when there is none.
KafkaAnswer(t) ==
    LET hits == {o \in LogStart..(HW - 1) : RecordAt(o).ts >= t}
    IN  IF hits = {} THEN -1 ELSE CHOOSE o \in hits : \A p \in hits : o <= p

\* Korvet's search (korvet/core/list_offsets.py over the time index): nothing if t is
\* above every timestamp ever appended; else the first checkpoint k whose t reaches t;
\* the records from the previous checkpoint's end (or the log start) up to k's end are
\* read; when they hold none (the records that raised k's t were removed), or there is
\* no such checkpoint, the records on from there.
FirstReaching(t) == {k \in DOMAIN times : times[k].t >= t}
ScanFrom(t) ==
    IF FirstReaching(t) = {} THEN Max(LogStart, IF times = <<>> THEN 0 ELSE times[Len(times)].end)
    ELSE LET k == CHOOSE k \in FirstReaching(t) : \A j \in FirstReaching(t) : k <= j
         IN  Max(LogStart, IF k = 1 THEN 0 ELSE times[k - 1].end)
ScanTo(t) ==
    IF FirstReaching(t) = {} THEN HW
    ELSE LET k == CHOOSE k \in FirstReaching(t) : \A j \in FirstReaching(t) : k <= j
         IN  Min(HW, times[k].end)
FirstIn(t, lo, hi) ==
    LET hits == {o \in lo..(hi - 1) : RecordAt(o).ts >= t}
    IN  IF hits = {} THEN -1 ELSE CHOOSE o \in hits : \A p \in hits : o <= p
IndexAnswer(t) ==
    IF t > meta.tmax THEN -1
    ELSE LET bracketed == FirstIn(t, ScanFrom(t), ScanTo(t))
         IN  IF bracketed # -1 THEN bracketed ELSE FirstIn(t, ScanTo(t), HW)

-----------------------------------------------------------------------------
(* append.lua: one atomic call per batch *)

KeepFrom(s, o) == SelectSeq(s, LAMBDA e : Last(e) >= o)

AppendRecords(recs, cutoff) ==
    LET n       == Len(recs)
        first   == meta.last + 1
        bump    == meta.inc # life      \* the first write of a new Redis life
        epoch1  == IF meta.epoch = -1 THEN Max(0, clock) \* a new partition
                   ELSE IF bump THEN Max(meta.epoch + 1, clock) ELSE meta.epoch
        epochs1 == IF meta.epoch = -1 \/ bump THEN Append(meta.epochs, <<epoch1, first>>)
                   ELSE meta.epochs
        entries == IF Format = "records"
                     THEN [i \in 1..n |-> [base |-> first + i - 1, recs |-> <<recs[i]>>]]
                     ELSE <<[base |-> first, recs |-> recs]>>
        s1      == stream \o entries
        last1   == first + n - 1
        tmax1   == Max(meta.tmax, MaxOf({recs[i].ts : i \in 1..n}))
        since1  == meta.since + n
        t1      == IF since1 >= Interval THEN Append(times, [end |-> last1 + 1, t |-> tmax1])
                   ELSE times
        since2  == IF since1 >= Interval THEN 0 ELSE since1
        \* retention by time: the checkpoints wholly older than the cutoff are a prefix
        old     == {k \in DOMAIN t1 : t1[k].t < cutoff}
        start1  == IF old = {} THEN meta.start ELSE Max(meta.start, t1[Cardinality(old)].end)
        s2      == KeepFrom(s1, start1)
        \* retention by size
        excess  == IF MaxLen > 0 THEN Len(s2) - MaxLen ELSE 0
        s3      == IF excess > 0 THEN SubSeq(s2, excess + 1, Len(s2)) ELSE s2
        start2  == IF excess > 0 THEN Max(start1, s3[1].base) ELSE start1
    IN  /\ stream' = s3
        /\ times' = SelectSeq(t1, LAMBDA c : c.end > start2)
        /\ meta' = [last |-> last1, start |-> start2, epoch |-> epoch1,
                    inc |-> IF meta.epoch = -1 \/ bump THEN life ELSE meta.inc,
                    epochs |-> epochs1, tmax |-> tmax1, since |-> since2]

AppendBatch ==
    /\ appends < MaxAppends
    /\ \E n \in 1..MaxBatch, cutoff \in Cutoffs :
         \E stamps \in [1..n -> Stamps] :
           AppendRecords([i \in 1..n |-> [rid |-> appends * MaxBatch + i, ts |-> stamps[i]]],
                         cutoff)
    /\ appends' = appends + 1
    /\ UNCHANGED <<disk, life, clock, restartedAt, restarts, pos, base, got, lastEpoch, known,
                   fenced>>

\* DeleteRecords: the log start moves to o (Kafka: up to the high watermark); a batch
\* holding o stays whole (batches format).
DeleteRecords ==
    /\ \E o \in DeleteTo :
         /\ LogStart < o /\ o <= HW
         /\ stream' = KeepFrom(stream, o)
         /\ times' = SelectSeq(times, LAMBDA c : c.end > o)
         /\ meta' = [meta EXCEPT !.start = o]
    /\ UNCHANGED <<disk, life, clock, restartedAt, appends, restarts, pos, base, got, lastEpoch,
                   known, fenced>>

-----------------------------------------------------------------------------
(* Redis' persistence (appendfsync everysec) and the clock *)

Fsync ==
    /\ disk # [stream |-> stream, meta |-> meta, times |-> times]
    /\ disk' = [stream |-> stream, meta |-> meta, times |-> times]
    /\ UNCHANGED <<logVars, life, clock, restartedAt, appends, restarts, pos, base, got,
                   lastEpoch, known, fenced>>

\* Redis restarts with what it fsynced; the writes after are lost.  A restart, and the
\* brokers' pause before writing to a Redis life they have just met, takes the clock
\* to a later second than any write of the life before.
RedisRestart ==
    /\ restarts < MaxRestarts /\ clock < MaxClock
    /\ stream' = disk.stream /\ meta' = disk.meta /\ times' = disk.times
    /\ life' = life + 1 /\ restarts' = restarts + 1
    /\ clock' = clock + 1 /\ restartedAt' = clock + 1
    /\ UNCHANGED <<disk, appends, pos, base, got, lastEpoch, known, fenced>>

Tick ==
    /\ clock < MaxClock
    /\ clock' = clock + 1
    /\ UNCHANGED <<logVars, disk, life, restartedAt, appends, restarts, pos, base, got,
                   lastEpoch, known, fenced>>

-----------------------------------------------------------------------------
(* A consumer (Kafka's Java consumer, KIP-320), auto.offset.reset=earliest *)

CUNCHANGED == <<logVars, disk, life, clock, restartedAt, appends, restarts>>

\* Metadata: the consumer learns the partition's epoch (never an older one than it knows:
\* Kafka's clients refuse metadata that goes back).  A newer epoch makes a consumer that
\* has read records validate its position before it fetches again (Kafka's consumer
\* awaits validation when the leader epoch changes).
Metadata ==
    /\ Consumer /\ CurEpoch > known
    /\ known' = CurEpoch
    /\ fenced' = (fenced \/ lastEpoch # -1)
    /\ UNCHANGED <<CUNCHANGED, pos, base, got, lastEpoch>>

\* A fetch at pos with the epoch the consumer knows: fenced if the partition has a
\* newer one (FENCED_LEADER_EPOCH); OFFSET_OUT_OF_RANGE outside the log (reset to the
\* log start); else up to FetchCount records, and the epoch of the last.
Fetch ==
    /\ ~fenced /\ known = CurEpoch
    /\ IF pos < LogStart \/ pos > HW
         THEN /\ pos' = LogStart /\ base' = LogStart /\ got' = <<>> /\ lastEpoch' = -1
              /\ UNCHANGED fenced
         ELSE LET k == Min(FetchCount, HW - pos)
              IN  /\ k > 0
                  /\ got' = got \o [i \in 1..k |-> <<pos + i - 1, RecordAt(pos + i - 1).rid>>]
                  /\ pos' = pos + k
                  /\ lastEpoch' = EpochOf(pos + k - 1)
                  /\ UNCHANGED <<base, fenced>>
    /\ UNCHANGED <<CUNCHANGED, known>>

FetchFenced ==
    /\ ~fenced /\ known # -1 /\ known < CurEpoch
    /\ fenced' = TRUE
    /\ UNCHANGED <<CUNCHANGED, pos, base, got, lastEpoch, known>>

\* After a fence and a metadata refresh: OffsetForLeaderEpoch(lastEpoch).  A position
\* past the end of that epoch is where the logs diverge: the consumer goes back there
\* (Kafka's consumer with a reset policy: "Truncation detected ... resetting offset to
\* the first offset known to diverge"); an epoch the log never had resets it.
Validate ==
    /\ fenced /\ known = CurEpoch
    /\ fenced' = FALSE
    /\ IF lastEpoch = -1 THEN UNCHANGED <<pos, base, got, lastEpoch>>
       ELSE LET end == EndOffset(lastEpoch)
            IN  IF end = -1
                  THEN /\ pos' = LogStart /\ base' = LogStart /\ got' = <<>>
                       /\ lastEpoch' = -1
                  ELSE IF end < pos
                    THEN /\ pos' = end /\ base' = end /\ got' = <<>> /\ lastEpoch' = -1
                    ELSE UNCHANGED <<pos, base, got, lastEpoch>>
    /\ UNCHANGED <<CUNCHANGED, known>>

\* The consumer positions itself at the end before reading (auto.offset.reset=latest with
\* no committed offset, a reset to latest, seekToEnd): ListOffsets LATEST answers the high
\* watermark and the epoch it lies in (0 on a partition never written), and the consumer
\* keeps that epoch with its position (Kafka's FetchPosition.offsetEpoch) to validate it
\* after the next epoch change, as it would the epoch of a record it read.
ListLatest ==
    /\ Consumer /\ ~fenced /\ known = CurEpoch /\ got = <<>> /\ lastEpoch = -1 /\ pos = base
    /\ pos' = HW /\ base' = HW /\ lastEpoch' = EpochOf(HW)
    /\ UNCHANGED <<CUNCHANGED, got, known, fenced>>

Next ==
    \/ AppendBatch \/ DeleteRecords \/ Fsync \/ RedisRestart \/ Tick
    \/ Metadata \/ Fetch \/ FetchFenced \/ Validate \/ ListLatest

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Invariants *)

TypeOK ==
    /\ meta.last \in -1..(MaxAppends * MaxBatch)
    /\ meta.start \in 0..(meta.last + 1)
    /\ \A i \in DOMAIN stream : Len(stream[i].recs) \in 1..MaxBatch
    /\ \A i \in DOMAIN times : times[i].end \in 1..(meta.last + 1)
    /\ pos \in Nat /\ base \in Nat /\ lastEpoch \in Int /\ known \in Int /\ fenced \in BOOLEAN

(* Offsets count records: the entries hold exactly the offsets from the log start (or *)
(* the start of the batch holding it) to the high watermark, each once, in order.     *)
Dense ==
    /\ \A i \in DOMAIN stream : i > 1 => stream[i].base = Last(stream[i - 1]) + 1
    /\ stream # <<>> => /\ stream[1].base <= LogStart /\ LogStart <= Last(stream[1])
                        /\ Last(stream[Len(stream)]) = meta.last
    /\ stream = <<>> => LogStart = HW
    /\ Format = "records" => \A i \in DOMAIN stream : Len(stream[i].recs) = 1

(* Each checkpoint says a true thing: every record ever appended below its end, still *)
(* in the log, carries a timestamp at most its t; ends and t grow.                     *)
IndexSound ==
    /\ \A k \in DOMAIN times :
         /\ times[k].t <= meta.tmax
         /\ \A o \in LogStart..(Min(times[k].end, HW) - 1) : RecordAt(o).ts <= times[k].t
    /\ \A k \in DOMAIN times : k > 1 => times[k - 1].end < times[k].end
                                        /\ times[k - 1].t <= times[k].t
    /\ \A o \in LogStart..(HW - 1) : RecordAt(o).ts <= meta.tmax

(* ListOffsets by time answers what Kafka answers. *)
TimeSearchIsKafkas == \A t \in Times : IndexAnswer(t) = KafkaAnswer(t)

(* The search reads a bounded stretch: when the records that set the checkpoint it  *)
(* stops at are still in the log, the bracket it reads holds at most Interval plus a *)
(* batch of records (Kafka's index interval), whatever the log's length.            *)
SearchBounded ==
    \A t \in Times : (t <= meta.tmax /\ IndexAnswer(t) = FirstIn(t, ScanFrom(t), ScanTo(t)))
                     => ScanTo(t) - ScanFrom(t) <= Interval + MaxBatch - 1

(* Epochs only grow, each starts after the one before, and the current one is last. *)
EpochsOrdered ==
    /\ \A j \in DOMAIN meta.epochs : j > 1 =>
         /\ meta.epochs[j - 1][1] < meta.epochs[j][1]
         /\ meta.epochs[j - 1][2] < meta.epochs[j][2]
    /\ meta.epochs # <<>> => meta.epochs[Len(meta.epochs)][1] = meta.epoch

(* A consumer validating its position always learns where its epoch ends: never      *)
(* UNDEFINED (-1), on which Kafka's consumer falls back to its reset policy, and with   *)
(* `latest` skips every record written since its position. The epoch it validates is   *)
(* that of a record it read or of the end it positioned at, 0 on a partition never       *)
(* written, which the history does not hold once the first write started its epoch.     *)
ValidationFindsAnEnd ==
    (fenced /\ known = CurEpoch /\ lastEpoch # -1) => EndOffset(lastEpoch) # -1

(* An epoch's end is never below the log start: a consumer that validates an epoch whose  *)
(* records retention or DeleteRecords removed is sent to the log start, as by Kafka,     *)
(* not below it to an OFFSET_OUT_OF_RANGE and its reset policy (latest: a skip).          *)
EndsInsideTheLog ==
    \A e \in {Hist[j][1] : j \in DOMAIN Hist} \cup {Hist[1][1] - 1} :
        EndOffset(e) = -1 \/ LogStart <= EndOffset(e)

(* The consumer never moves past a record of the log without having read it: every   *)
(* record still in the log between where it last positioned and its position is one  *)
(* it read there.  Checked when it has just read (not while it has not yet fetched   *)
(* since the log changed under it, which it cannot know).                             *)
ReadOffsets == {got[i][1] : i \in DOMAIN got}
ReadAt(o) == LET i == CHOOSE i \in DOMAIN got : got[i][1] = o IN got[i][2]
NoSilentSkip ==
    [][ (pos' > pos /\ base' = base) =>
          \A o \in Max(base', LogStart')..(Min(pos', HW') - 1) :
              /\ o \in ReadOffsets'
              /\ ReadAt(o)' = (RecordAt(o).rid)'
     ]_vars

=============================================================================
