---------------------------- MODULE OffsetCodec ----------------------------
(***************************************************************************)
(* Kafka offsets <-> Redis stream entry ids, and the broker's append rule. *)
(*                                                                         *)
(* A Kafka offset packs a Redis entry id ms-seq as                         *)
(*                                                                         *)
(*     offset = ms * 2^Bits + seq        with 0 <= seq < 2^Bits            *)
(*                                                                         *)
(* The broker, not Redis' `XADD *`, chooses the ids.  Each produced batch  *)
(* of n records is appended by one atomic script that reads the stream's   *)
(* last-generated id, reserves the n consecutive offsets starting at       *)
(*                                                                         *)
(*     max(last + 1, Encode(now, 0))                                       *)
(*                                                                         *)
(* and XADDs every record with the id its offset decodes to.  Several      *)
(* producers (through several broker processes) append to one partition;   *)
(* their batches are serialised only by the atomicity of that script.  The *)
(* clock each append reads may advance, stand still or step back.          *)
(*                                                                         *)
(* Scale.  In production offsets are signed 64-bit integers (OffsetBits =  *)
(* 63: offsets 0 .. 2^63-1) and Bits is within 1..22.  TLC's integers are  *)
(* 32-bit, so the models shrink the offset space to OffsetBits bits; every *)
(* boundary (the last offset, the last millisecond, the clamp of a clock   *)
(* past it) keeps its shape.  korvet/core/offsets.py takes the same        *)
(* offset_bits parameter, which is how the replay test runs the Python     *)
(* code on exactly these models.  Names: spec/README.md.                   *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    Bits,        \* sequence bits of the topic (korvet.sequence.bits)
    OffsetBits,  \* offsets are 0 .. 2^OffsetBits - 1 (production: 63)
    MaxClock,    \* the clock ranges over 0 .. MaxClock (may exceed MaxMs)
    Producers,   \* the producers; each has at most one batch in flight
    MaxBatch,    \* a batch holds 1 .. MaxBatch records
    MaxBatches   \* CONSTRAINT: explore logs of at most this many batches

ASSUME /\ Bits \in 1..22
       /\ OffsetBits \in (Bits + 1)..63
       /\ MaxClock \in Nat \ {0}
       /\ MaxBatch \in Nat \ {0}
       /\ MaxBatches \in Nat

-----------------------------------------------------------------------------
(* The codec *)

SeqLimit  == 2^Bits                     \* ids per millisecond: seq in 0 .. SeqLimit-1
MaxOffset == 2^OffsetBits - 1           \* production: 2^63 - 1
MaxMs     == MaxOffset \div SeqLimit    \* the last millisecond whose offsets all fit
Offsets   == 0..MaxOffset
Ids       == (0..MaxMs) \X (0..(SeqLimit - 1))   \* the codec's valid domain

Encode(ms, seq) == ms * SeqLimit + seq
EncodeId(id)    == Encode(id[1], id[2])
Decode(offset)  == <<offset \div SeqLimit, offset % SeqLimit>>

\* Redis orders entry ids by ms, then by seq.
IdLess(a, b) == a[1] < b[1] \/ (a[1] = b[1] /\ a[2] < b[2])

Min(a, b) == IF a < b THEN a ELSE b
Max(a, b) == IF a > b THEN a ELSE b

(* The append floor: the offset of the stream's last-generated id, which   *)
(* is 0-0 for a new stream (Redis refuses 0-0 as an id, so offset 0 is     *)
(* never handed out).  An id with a sequence wider than Bits (written by   *)
(* `XADD *`, not by the broker) has no offset; it counts as the last       *)
(* offset of its millisecond, so the next batch starts in the next one.    *)
LastOffset(id) ==
    IF id[2] >= SeqLimit THEN Encode(id[1], SeqLimit - 1) ELSE EncodeId(id)

(* The reservation rule.  The clock is clamped to MaxMs: past it the floor *)
(* stays at the last millisecond and offsets keep counting from last + 1.  *)
Floor(now)            == Encode(Min(now, MaxMs), 0)
FirstOffset(last, now) == Max(last + 1, Floor(now))
Fits(last, now, n)    == FirstOffset(last, now) + n - 1 <= MaxOffset

-----------------------------------------------------------------------------
(* The partition *)

VARIABLES
    clock,     \* the broker's wall clock (ms) that the next append reads
    inflight,  \* inflight[p]: records in p's batch waiting to be appended (0: none)
    lastId,    \* the stream's last-generated id (XINFO STREAM last-generated-id)
    stream,    \* the Redis stream: <<[id, batch]>>, what Redis holds: the entry id, and
               \* which produce request the record came in (it indexes acks)
    acks       \* the produce responses, in append order: <<[producer, base, count]>>;
               \* base is the offset the producer is told for its batch's first record

vars == <<clock, inflight, lastId, stream, acks>>

Init ==
    /\ clock \in 0..MaxClock
    /\ inflight = [p \in Producers |-> 0]
    /\ lastId = <<0, 0>>
    /\ stream = <<>>
    /\ acks = <<>>

(* Producer p hands a batch of n records to the broker. *)
Send(p) ==
    /\ inflight[p] = 0
    /\ \E n \in 1..MaxBatch : inflight' = [inflight EXCEPT ![p] = n]
    /\ UNCHANGED <<clock, lastId, stream, acks>>

(* The atomic append script: read the last-generated id, reserve n         *)
(* consecutive offsets, XADD each record under the id its offset decodes to *)
(* (carrying into the next millisecond past seq 2^Bits - 1), reply with    *)
(* the base offset.                                                         *)
AppendBatch(p) ==
    LET n     == inflight[p]
        first == FirstOffset(LastOffset(lastId), clock)
    IN  /\ n > 0
        /\ Fits(LastOffset(lastId), clock, n)
        /\ stream' = stream \o [i \in 1..n |->
                         [id |-> Decode(first + i - 1), batch |-> Len(acks) + 1]]
        /\ lastId' = Decode(first + n - 1)
        /\ acks' = Append(acks, [producer |-> p, base |-> first, count |-> n])
        /\ inflight' = [inflight EXCEPT ![p] = 0]
        /\ UNCHANGED clock

(* The batch would pass the last offset: the script writes nothing and the  *)
(* producer gets an error (append.lua answers FULL, which                  *)
(* korvet/core/produce.py turns into KAFKA_STORAGE_ERROR).                  *)
RejectBatch(p) ==
    /\ inflight[p] > 0
    /\ ~Fits(LastOffset(lastId), clock, inflight[p])
    /\ inflight' = [inflight EXCEPT ![p] = 0]
    /\ UNCHANGED <<clock, lastId, stream, acks>>

(* The clock jumps to any other value: forwards, or back (NTP, another     *)
(* broker process with a skewed clock).  Standing still is not ticking.    *)
Tick ==
    /\ \E t \in (0..MaxClock) \ {clock} : clock' = t
    /\ UNCHANGED <<inflight, lastId, stream, acks>>

Next ==
    \/ Tick
    \/ \E p \in Producers : Send(p) \/ AppendBatch(p) \/ RejectBatch(p)

Spec == Init /\ [][Next]_vars

StateConstraint == Len(acks) <= MaxBatches

-----------------------------------------------------------------------------
(* Laws of the codec itself (constant-level: TLC evaluates them once). *)

\* Encode is a bijection between the valid ids and 0 .. MaxOffset.
CodecRoundTrip ==
    /\ \A id \in Ids : EncodeId(id) \in Offsets /\ Decode(EncodeId(id)) = id
    /\ \A o \in Offsets : Decode(o) \in Ids /\ EncodeId(Decode(o)) = o

\* Offsets compare exactly as the ids they encode, both ways.
CodecOrder ==
    /\ \A a, b \in Ids : IdLess(a, b) <=> EncodeId(a) < EncodeId(b)
    /\ \A o1, o2 \in Offsets : o1 < o2 <=> IdLess(Decode(o1), Decode(o2))

\* The carry: the offset after the last one of a millisecond is the next
\* millisecond's first.
CodecCarry ==
    \A ms \in 0..(MaxMs - 1) : Decode(Encode(ms, SeqLimit - 1) + 1) = <<ms + 1, 0>>

-----------------------------------------------------------------------------
(* Invariants.  They compare what the two sides of the log observe: the     *)
(* offsets a producer is told (acks) and the offsets a consumer computes    *)
(* from the entry ids Redis holds (EncodeId of stream[j].id); neither is a  *)
(* copy of the other in the state.                                          *)

Entry == [id : Ids, batch : Nat \ {0}]
Ack   == [producer : Producers, base : Offsets, count : 1..MaxBatch]

\* The offset a consumer reads for stream[j]: the one its entry id encodes.
Read(j) == EncodeId(stream[j].id)
\* The offset stream[j]'s producer was told: its batch's base offset, plus the
\* record's place among the records of that batch.
Told(j) == acks[stream[j].batch].base
           + Cardinality({i \in 1..j : stream[i].batch = stream[j].batch}) - 1

TypeOK ==
    /\ clock \in 0..MaxClock
    /\ inflight \in [Producers -> 0..MaxBatch]
    /\ lastId \in Ids
    /\ stream \in Seq(Entry)
    /\ acks \in Seq(Ack)

\* Round trip on the valid domain, and on every stored record: the offset the
\* producer was told is the one a consumer computes from the entry id, and it
\* decodes back to that id (a fetch at it starts there).
RoundTrip ==
    /\ CodecRoundTrip
    /\ CodecCarry
    /\ \A j \in DOMAIN stream : Read(j) = Told(j) /\ Decode(Told(j)) = stream[j].id

\* Order preserved both ways, on the domain and between any two records: Redis
\* orders the entries as their producers' offsets are ordered.
OrderPreserved ==
    /\ CodecOrder
    /\ \A i, j \in DOMAIN stream : IdLess(stream[i].id, stream[j].id) <=> Told(i) < Told(j)

UniqueEntryIds ==
    \A i, j \in DOMAIN stream : i # j => stream[i].id # stream[j].id

\* A batch of n records is stored as n entries, contiguously (never interleaved
\* with another), that a consumer reads at the n consecutive offsets from the
\* base offset its producer was told.
BatchConsecutive ==
    /\ \A i, j \in DOMAIN stream : i < j => stream[i].batch <= stream[j].batch
    /\ \A k \in DOMAIN acks :
          LET records == SelectSeq(stream, LAMBDA e : e.batch = k)
          IN  /\ Len(records) = acks[k].count
              /\ \A i \in DOMAIN records : EncodeId(records[i].id) = acks[k].base + i - 1

\* The offsets a consumer reads strictly increase along the log, batch after batch.
StrictlyIncreasing ==
    \A j \in DOMAIN stream : j > 1 => Read(j - 1) < Read(j)

\* Redis accepts every XADD: each id is greater than the stream's previous
\* last-generated id (0-0 for a new stream), and lastId tracks the last one.
XAddAccepted ==
    /\ \A i \in DOMAIN stream :
          IdLess(IF i = 1 THEN <<0, 0>> ELSE stream[i - 1].id, stream[i].id)
    /\ lastId = IF stream = <<>> THEN <<0, 0>> ELSE stream[Len(stream)].id

\* Every offset handed out fits a signed 64-bit integer (the model's scaled
\* width), and every id the broker writes is in the codec's domain.
FitsInt64 ==
    /\ \A j \in DOMAIN stream : stream[j].id \in Ids
    /\ \A k \in DOMAIN acks : acks[k].base \in Offsets /\ acks[k].base + acks[k].count - 1 \in Offsets

=============================================================================
