---------------------------- MODULE PartitionLog ----------------------------
(***************************************************************************)
(* One partition on the storage path: the Redis stream and meta hash that  *)
(* korvet/storage/lua/append.lua and bounds.lua keep, appends from several *)
(* brokers (each with its own clock, so an append may read any clock       *)
(* value), retention trims at write time (MINID for retention.ms, MAXLEN   *)
(* for the size bounds; exact, or approximate: whole stream nodes only),   *)
(* a foreign writer using Redis' own ids (`XADD *`, spec RedisStarIds),    *)
(* and one consumer fetching through the fetch path of                     *)
(* korvet/server/handlers/fetch.py: XRANGE from its fetch offset, then the *)
(* bounds (HMGET, or bounds.lua for a partition nothing was appended to),  *)
(* in a pipeline that is not a transaction, so other writes interleave;    *)
(* the read-ahead that prepares the predicted next response; and seeks.   *)
(*                                                                         *)
(* Offsets are the codec's (spec OffsetCodec): offset = ms * 2^Bits + seq, *)
(* ids are sparse (the millisecond follows the clock), and the offset      *)
(* space is shrunk to OffsetBits bits for TLC.  Names: spec/README.md;     *)
(* explained in docs/spec/storage-path.md.                                  *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    Bits, OffsetBits,   \* as in OffsetCodec
    Clocks,             \* the clock values an append, a read or XADD * may see
    MaxBatch,           \* records per batch 1..MaxBatch
    TimeRetention,      \* retention.ms is set ...
    RetentionMs,        \* ... to this: an append trims MINID now - RetentionMs
    SizeRetention,      \* a size bound is set ...
    MaxLen,             \* ... to this many entries: an append trims MAXLEN
    Approximate,        \* korvet.trim.approximate: trims remove whole nodes only
    NodeSize,           \* stream-node-max-entries (entries per radix-tree node)
    ForeignWrites,      \* how many XADD * the foreign writer makes
    FetchCount,         \* XRANGE COUNT of a fetch
    Consumer,           \* is there a consumer fetching?
    SeekTo,             \* the offsets the consumer may seek to
    ReadAhead,          \* fetch.py prepares the predicted next response
    ReadAheadChecked,   \* ... and checks the log start again before using it
    ReadAheadSameOffset, \* ... and uses it only for a fetch at the offset it was read for
    MaxAppends          \* appends (accepted or refused) in a behaviour

ASSUME /\ Bits \in 1..22 /\ OffsetBits \in (Bits + 1)..30
       /\ Clocks \subseteq Nat /\ MaxBatch \in Nat \ {0}
       /\ TimeRetention \in BOOLEAN /\ RetentionMs \in Nat
       /\ SizeRetention \in BOOLEAN /\ MaxLen \in Nat
       /\ Approximate \in BOOLEAN /\ NodeSize \in Nat \ {0}
       /\ ForeignWrites \in Nat /\ FetchCount \in Nat \ {0} /\ Consumer \in BOOLEAN /\ SeekTo \subseteq Nat
       /\ ReadAhead \in BOOLEAN /\ ReadAheadChecked \in BOOLEAN
       /\ ReadAheadSameOffset \in BOOLEAN /\ MaxAppends \in Nat

SeqLimit  == 2^Bits
MaxOffset == 2^OffsetBits - 1
MaxMs     == MaxOffset \div SeqLimit
NoId      == <<-1, -1>>

Encode(id) == id[1] * SeqLimit + id[2]
Decode(o)  == <<o \div SeqLimit, o % SeqLimit>>
HasOffset(id) == id[2] < SeqLimit            \* XADD * may write wider sequences
IdLess(a, b) == a[1] < b[1] \/ (a[1] = b[1] /\ a[2] < b[2])
MaxId(a, b) == IF IdLess(a, b) THEN b ELSE a
Min(a, b) == IF a < b THEN a ELSE b
\* The first id with an offset at or after id (an id wider than Bits has none).
Norm(id)  == IF id[2] >= SeqLimit THEN <<id[1] + 1, 0>> ELSE id
After(id) == Norm(<<id[1], id[2] + 1>>)

VARIABLES
    stream,    \* the entries: <<[id, node, by]>>: node numbers the radix-tree node holding
               \* it (1 at the head), by is "korvet" (append.lua) or "foreign" (XADD *)
    lastGen,   \* the stream's last-generated id (<<0, 0>> before the key exists)
    exists,    \* the stream key exists
    fill,      \* entries ever added to the last node (0: the next XADD opens a node)
    meta,      \* the meta hash: [last, start] ids (NoId: field absent)
    appends,   \* appends so far (bounds the model)
    foreign,   \* XADD * so far
    pos,       \* the consumer's fetch position
    f,         \* its fetch in progress
    prep,      \* the read-ahead: the prepared next response
    resp       \* the last fetch response

vars == <<stream, lastGen, exists, fill, meta, appends, foreign, pos, f, prep, resp>>

Ids(s) == [i \in DOMAIN s |-> s[i].id]
StartOffset == IF meta.start = NoId THEN 0 ELSE Encode(meta.start)
HighWatermark ==
    IF meta.last # NoId THEN Encode(Norm(meta.last)) + (IF HasOffset(meta.last) THEN 1 ELSE 0)
    ELSE StartOffset

NoFetch == [phase |-> "idle", from |-> 0, got |-> <<>>, startAtReq |-> 0, start |-> 0, hw |-> 0]
NoPrep  == [phase |-> "none", from |-> 0, got |-> <<>>, start |-> 0, hw |-> 0]
NoResp  == [from |-> 0, recs |-> <<>>, err |-> "NO_FETCH", startAtReq |-> 0, hw |-> 0]

Init ==
    /\ stream = <<>> /\ lastGen = <<0, 0>> /\ exists = FALSE /\ fill = 0
    /\ meta = [last |-> NoId, start |-> NoId]
    /\ appends = 0 /\ foreign = 0
    /\ pos = 0
    /\ f = NoFetch /\ prep = NoPrep /\ resp = NoResp

-----------------------------------------------------------------------------
(* Redis stream primitives *)

\* XADD of ids (in order) to s: the nodes they land in, and the new fill.
RECURSIVE AddAll(_, _, _, _)
AddAll(s, fl, ids, by) ==
    IF ids = <<>> THEN <<s, fl>>
    ELSE LET node == IF s # <<>> /\ fl > 0 /\ fl < NodeSize THEN s[Len(s)].node
                     ELSE IF s = <<>> THEN 1 ELSE s[Len(s)].node + 1
             fl2  == IF s # <<>> /\ fl > 0 /\ fl < NodeSize THEN fl + 1 ELSE 1
         IN  AddAll(Append(s, [id |-> Head(ids), node |-> node, by |-> by]), fl2, Tail(ids), by)

NodeOf(s, i) == {j \in DOMAIN s : s[j].node = s[i].node}
\* Remove the first k entries; nodes are numbered from 1 at the head (canonical).
Drop(s, k) == LET r == SubSeq(s, k + 1, Len(s))
              IN  [i \in DOMAIN r |-> [r[i] EXCEPT !.node = r[i].node - r[1].node + 1]]
\* Entries below id: exact XTRIM MINID removes all of them; approximate only
\* the leading nodes whose last entry is below id.
BelowCount(s, id) == Cardinality({i \in DOMAIN s : IdLess(s[i].id, id)})
RECURSIVE ApproxMinId(_, _)
ApproxMinId(s, id) ==
    IF s = <<>> THEN 0
    ELSE LET n == Cardinality(NodeOf(s, 1))
         IN  IF IdLess(s[n].id, id) THEN n + ApproxMinId(Drop(s, n), id) ELSE 0
RECURSIVE ApproxMaxLen(_, _)
ApproxMaxLen(s, k) ==
    IF s = <<>> THEN 0
    ELSE LET n == Cardinality(NodeOf(s, 1))
         IN  IF Len(s) - n >= k THEN n + ApproxMaxLen(Drop(s, n), k) ELSE 0
\* A trim that empties the stream empties its last node too.
FillAfter(s, fl) == IF s = <<>> THEN 0 ELSE fl

-----------------------------------------------------------------------------
(* append.lua: one atomic call per batch of n records at clock now *)

StartNow == IF meta.start # NoId THEN meta.start
            ELSE IF stream # <<>> THEN Norm(stream[1].id) ELSE NoId
FirstFrom(last, t) ==
    LET a == MaxId(After(last), <<t, 0>>)
    IN  IF StartNow # NoId THEN MaxId(a, StartNow) ELSE a

AppendAt(n, now) ==
    LET t      == Min(now, MaxMs)
        metaLast == IF meta.last # NoId THEN meta.last ELSE lastGen
        \* the first XADD is refused when a foreign XADD * wrote past meta.last:
        \* the script then continues from Redis' last-generated id
        first  == IF IdLess(lastGen, FirstFrom(metaLast, t)) THEN FirstFrom(metaLast, t)
                  ELSE FirstFrom(lastGen, t)
        ids    == [i \in 1..n |-> Decode(Encode(first) + i - 1)]
        last   == ids[n]
        added  == AddAll(stream, fill, ids, "korvet")
        s1     == added[1]
        start1 == IF StartNow = NoId THEN first ELSE StartNow
        minId  == IF TimeRetention /\ now - RetentionMs >= 0 THEN now - RetentionMs ELSE -1
        \* time retention
        allOld == minId >= 0 /\ IdLess(start1, <<minId, 0>>) /\ IdLess(last, <<minId, 0>>)
        someOld == minId >= 0 /\ IdLess(start1, <<minId, 0>>) /\ ~allOld
        cutT   == IF allOld THEN BelowCount(s1, <<minId, 0>>)
                  ELSE IF someOld /\ Approximate THEN ApproxMinId(s1, <<minId, 0>>)
                  ELSE IF someOld THEN BelowCount(s1, <<minId, 0>>) ELSE 0
        s2     == Drop(s1, cutT)
        start2 == IF allOld THEN MaxId(start1, After(last))
                  ELSE IF someOld /\ ~Approximate /\ cutT > 0 THEN MaxId(start1, After(s1[cutT].id))
                  ELSE start1
        \* size retention
        excess == IF SizeRetention THEN Len(s2) - MaxLen ELSE 0
        cutS   == IF excess <= 0 THEN 0
                  ELSE IF Approximate THEN ApproxMaxLen(s2, MaxLen) ELSE excess
        s3     == Drop(s2, cutS)
        start3 == IF ~Approximate /\ cutS > 0 THEN MaxId(start2, After(s2[cutS].id)) ELSE start2
        \* approximate: the log starts at the first entry left (after the batch if none)
        approxCut == Approximate /\ (cutS > 0 \/ (someOld /\ cutT > 0))
        start4 == IF ~approxCut THEN start3
                  ELSE IF s3 # <<>> THEN MaxId(start3, Norm(s3[1].id))
                  ELSE MaxId(start3, After(last))
    IN  /\ appends < MaxAppends
        /\ appends' = appends + 1
        /\ IF Encode(first) + n - 1 > MaxOffset
             THEN UNCHANGED <<stream, lastGen, exists, fill, meta>>   \* FULL: nothing written
             ELSE /\ stream' = s3
                  /\ fill' = FillAfter(s3, added[2])
                  /\ lastGen' = last
                  /\ exists' = TRUE
                  /\ meta' = [last |-> last, start |-> start4]
        /\ UNCHANGED <<foreign, pos, f, prep, resp>>

AppendBatch == \E n \in 1..MaxBatch, now \in Clocks : AppendAt(n, now)

(* A foreign writer: XADD key * (Redis' own id, spec RedisStarIds). *)
XAddStar ==
    /\ foreign < ForeignWrites
    /\ \E now \in {t \in Clocks : 0 < t /\ t <= MaxMs} :   \* a real clock is far below MaxMs
         LET id == IF now > lastGen[1] THEN <<now, 0>> ELSE <<lastGen[1], lastGen[2] + 1>>
             added == AddAll(stream, fill, <<id>>, "foreign")
         IN  /\ stream' = added[1] /\ fill' = added[2]
             /\ lastGen' = id /\ exists' = TRUE
    /\ foreign' = foreign + 1
    /\ UNCHANGED <<meta, appends, pos, f, prep, resp>>

-----------------------------------------------------------------------------
(* The fetch path *)

\* XRANGE key <decode(from)> + COUNT FetchCount; past the last offset, from the
\* first id after it ("(" + its id: only ids wider than Bits are there).
XRange(from) ==
    LET lo == IF from > MaxOffset THEN <<MaxMs, SeqLimit>> ELSE Decode(from)
        ge == SelectSeq(Ids(stream), LAMBDA id : ~IdLess(id, lo))
    IN  SubSeq(ge, 1, Min(FetchCount, Len(ge)))

\* The bounds a read sees: the meta hash (HMGET); for a partition nothing was
\* appended to, bounds.lua gives it its log start at (now, 0) and writes only
\* that; a stream only the foreign writer wrote is read as Redis sees it.
ForeignHW == IF lastGen = <<0, 0>> THEN 0
             ELSE Encode(Norm(lastGen)) + (IF HasOffset(lastGen) THEN 1 ELSE 0)
BoundsAt(now) ==
    IF meta.last # NoId \/ meta.start # NoId THEN [start |-> StartOffset, hw |-> HighWatermark]
    ELSE IF exists
      THEN [start |-> IF stream = <<>> THEN ForeignHW
                      ELSE Min(Encode(Norm(stream[1].id)), ForeignHW),
            hw |-> ForeignHW]
      ELSE LET t == IF now = 0 THEN <<0, 1>> ELSE <<Min(now, MaxMs), 0>>
           IN  [start |-> Encode(t), hw |-> Encode(t)]
\* The log start as a read would report it now (0 before anything exists).
LogStartNow == IF meta.last = NoId /\ meta.start = NoId /\ ~exists THEN 0 ELSE BoundsAt(0).start
BoundsWrite(now) ==
    IF meta.last = NoId /\ meta.start = NoId /\ ~exists
      THEN meta' = [last |-> NoId, start |-> IF now = 0 THEN <<0, 1>> ELSE <<Min(now, MaxMs), 0>>]
      ELSE UNCHANGED meta

\* What fetch.py answers from what it read: records with an offset, below the
\* high watermark (an XADD * above it waits for the next append), or
\* OFFSET_OUT_OF_RANGE for a fetch offset outside [start, hw].
Records(got, hw) ==
    LET ok == SelectSeq(got, LAMBDA id : HasOffset(id) /\ Encode(id) < hw)
    IN  [i \in DOMAIN ok |-> Encode(ok[i])]

Answer(from, got, start, hw, startAtReq) ==
    LET err  == from < start \/ from > hw
        recs == IF err THEN <<>> ELSE Records(got, hw)
    IN  /\ resp' = [from |-> from, recs |-> recs, err |-> IF err THEN "OFFSET_OUT_OF_RANGE" ELSE "NONE",
                    startAtReq |-> startAtReq, hw |-> hw]
        /\ f' = NoFetch
        \* the client: OFFSET_OUT_OF_RANGE resets it to the log start (earliest)
        /\ pos' = IF err THEN start ELSE IF recs = <<>> THEN pos ELSE recs[Len(recs)] + 1
        \* the read-ahead starts for the offset after these records
        /\ prep' = IF ReadAhead /\ ~err /\ recs # <<>>
                     THEN [phase |-> "range", from |-> recs[Len(recs)] + 1, got |-> <<>>,
                           start |-> 0, hw |-> 0]
                     ELSE NoPrep

UNFETCH == <<stream, lastGen, exists, fill, appends, foreign>>

(* The consumer sends a fetch at its position; a prepared response for     *)
(* exactly that offset is taken (waited for if still being read).          *)
Request ==
    /\ Consumer /\ f.phase = "idle"
    /\ LET use == prep.phase # "none" /\ (prep.from = pos \/ ~ReadAheadSameOffset)
       IN  /\ f' = [NoFetch EXCEPT !.phase = IF use THEN "await" ELSE "range", !.from = pos,
                                   !.startAtReq = LogStartNow]
           /\ prep' = IF use THEN prep ELSE NoPrep
    /\ UNCHANGED <<UNFETCH, meta, pos, resp>>

FetchRange ==
    /\ f.phase = "range"
    /\ f' = [f EXCEPT !.phase = "bounds", !.got = XRange(f.from)]
    /\ UNCHANGED <<UNFETCH, meta, pos, prep, resp>>

FetchBounds ==
    /\ f.phase = "bounds"
    /\ \E now \in Clocks :
         /\ BoundsWrite(now)
         /\ Answer(f.from, f.got, BoundsAt(now).start, BoundsAt(now).hw, f.startAtReq)
    /\ UNCHANGED UNFETCH

(* The read-ahead's own XRANGE and bounds, whenever the broker gets to them. *)
PrepRange ==
    /\ prep.phase = "range"
    /\ prep' = [prep EXCEPT !.phase = "bounds", !.got = XRange(prep.from)]
    /\ UNCHANGED <<UNFETCH, meta, pos, f, resp>>

PrepBounds ==
    /\ prep.phase = "bounds"
    /\ \E now \in Clocks :
         /\ BoundsWrite(now)
         /\ prep' = [prep EXCEPT !.phase = "ready", !.start = BoundsAt(now).start,
                                 !.hw = BoundsAt(now).hw]
    /\ UNCHANGED <<UNFETCH, pos, f, resp>>

(* The prepared response answers the request, if it carries records (a    *)
(* consumer's min_bytes is at least 1); else the broker reads afresh.      *)
(* Checked: the log start is read again first, and a fetch offset now     *)
(* below it reads afresh too.                                              *)
UsePrepared ==
    /\ f.phase = "await" /\ prep.phase = "ready"
    /\ LET err  == prep.from < prep.start \/ prep.from > prep.hw
           none == err \/ Records(prep.got, prep.hw) = <<>>
       IN  IF none \/ (ReadAheadChecked /\ f.from < BoundsAt(0).start)
             THEN /\ f' = [f EXCEPT !.phase = "range"]
                  /\ prep' = NoPrep
                  /\ UNCHANGED <<pos, resp>>
             ELSE Answer(f.from, prep.got, prep.start, prep.hw, f.startAtReq)
    /\ UNCHANGED <<UNFETCH, meta>>

(* The prediction expires (5 s) or the connection's next request differs.  *)
Expire ==
    /\ prep.phase # "none" /\ f.phase # "await"
    /\ prep' = NoPrep
    /\ UNCHANGED <<UNFETCH, meta, pos, f, resp>>

(* The consumer seeks (SeekTo: any offset in 0..MaxOffset + 1, or a few). *)
Seek ==
    /\ Consumer /\ f.phase = "idle"
    /\ \E o \in SeekTo : o # pos /\ pos' = o
    /\ resp' = NoResp
    /\ UNCHANGED <<UNFETCH, meta, f, prep>>

Next ==
    \/ AppendBatch \/ XAddStar
    \/ Request \/ FetchRange \/ FetchBounds \/ PrepRange \/ PrepBounds \/ UsePrepared
    \/ Expire \/ Seek

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Invariants *)

TypeOK ==
    /\ \A i \in DOMAIN stream : /\ stream[i].id \in Nat \X Nat
                                /\ stream[i].node \in 1..i
                                /\ stream[i].by \in {"korvet", "foreign"}
    /\ lastGen \in Nat \X Nat /\ exists \in BOOLEAN
    /\ fill \in 0..NodeSize
    /\ meta.last \in (Nat \X Nat) \cup {NoId} /\ meta.start \in (Nat \X Nat) \cup {NoId}
    /\ appends \in 0..MaxAppends /\ foreign \in 0..ForeignWrites
    /\ f.phase \in {"idle", "range", "bounds", "await"}
    /\ prep.phase \in {"none", "range", "bounds", "ready"}
    /\ resp.err \in {"NO_FETCH", "NONE", "OFFSET_OUT_OF_RANGE"}

(* Redis accepted every XADD: ids strictly increase; lastGen is the last. *)
StreamOrdered ==
    /\ \A i \in DOMAIN stream : i > 1 => IdLess(stream[i - 1].id, stream[i].id)
    /\ \A i \in DOMAIN stream : ~IdLess(lastGen, stream[i].id)

(* Every offset the broker handed out fits: each entry append.lua wrote has *)
(* an id with an offset within the offset space, and so do meta.last and   *)
(* the high watermark (at most one past the last offset).  It holds only   *)
(* because AppendAt refuses (FULL) a batch whose last record would pass    *)
(* MaxOffset; a check of the first record alone breaks it (a mutant).      *)
OffsetsFit ==
    /\ \A i \in DOMAIN stream :
          stream[i].by = "korvet" => HasOffset(stream[i].id) /\ Encode(stream[i].id) <= MaxOffset
    /\ meta.last # NoId => HasOffset(meta.last) /\ Encode(meta.last) <= MaxOffset
    /\ HighWatermark <= MaxOffset + 1

(* The log start never passes the high watermark, and no record the broker *)
(* appended lies below the log start (a foreign XADD * may write below it:  *)
(* such an entry is never fetched) or at or above the high watermark.      *)
BoundsConsistent ==
    /\ meta.start # NoId => StartOffset <= HighWatermark
    /\ \A i \in DOMAIN stream :
          stream[i].by = "korvet" =>
              /\ StartOffset <= Encode(stream[i].id)
              /\ Encode(stream[i].id) < HighWatermark

(* A fetch never returns a record below the log start as it was when the  *)
(* request arrived, nor at or above the high watermark it reports, and    *)
(* records come in offset order from the fetch offset.                    *)
FetchWithinBounds ==
    /\ \A i \in DOMAIN resp.recs :
          /\ resp.startAtReq <= resp.recs[i] /\ resp.recs[i] < resp.hw
          /\ resp.from <= resp.recs[i]
          /\ i > 1 => resp.recs[i - 1] < resp.recs[i]

(* Kafka's fetch contract: a response to a fetch at offset o that moved the *)
(* consumer to pos carried every record of the log in [o, pos): the        *)
(* consumer, fetching on from pos, skips nothing still in the log.         *)
NoRecordSkipped ==
    resp.err = "NONE" =>
        \A i \in DOMAIN stream :
            LET id == stream[i].id
            IN  (HasOffset(id) /\ resp.from <= Encode(id) /\ Encode(id) < pos)
                    => \E j \in DOMAIN resp.recs : resp.recs[j] = Encode(id)

(* The log start and the high watermark never move back. *)
BoundsMonotonic ==
    [][(meta.start # NoId => meta'.start # NoId /\ ~IdLess(meta'.start, meta.start))
       /\ (meta.last # NoId => meta'.last # NoId /\ ~IdLess(meta'.last, meta.last))]_vars

StateConstraint == TRUE
=============================================================================
