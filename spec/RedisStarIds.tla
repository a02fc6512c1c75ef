---------------------------- MODULE RedisStarIds ----------------------------
(***************************************************************************)
(* Redis' own entry-id generation for `XADD key * ...`, and a claim about  *)
(* it from the original product's design notes (seed 003):                *)
(*                                                                         *)
(*   "Maximum sequence per millisecond: 2^sequenceBits - 1 (1023 for 10    *)
(*    bits).  If sequence exceeds maximum, Redis automatically increments  *)
(*    timestamp."                                                          *)
(*                                                                         *)
(* If that were true, every id Redis generates would have a sequence below *)
(* 2^Bits, i.e. every id would have a Kafka offset ms * 2^Bits + seq.  The *)
(* invariant SeedClaim_SeqFitsBits states exactly that; TLC refutes it.    *)
(*                                                                         *)
(* What Redis does (t_stream.c, streamNextID / streamIncrID): the new id   *)
(* is <<now, 0>> when the clock is past the last id's millisecond, else    *)
(* <<last.ms, last.seq + 1>>.  The sequence is an unsigned 64-bit integer  *)
(* that knows nothing of Bits; only at 2^64 - 1 does it roll into the next *)
(* millisecond.  TLC's integers are 32-bit, so SeqMax stands for 2^64 - 1; *)
(* all that matters is SeqMax >= 2^Bits (production: 2^64 - 1 vs at most  *)
(* 2^22).  Names: spec/README.md; verdict: docs/spec/offset-codec.md.      *)
(***************************************************************************)
EXTENDS Naturals

CONSTANTS
    Bits,       \* the sequence bits the claim is about
    SeqMax,     \* the largest sequence Redis generates (production: 2^64 - 1)
    MaxClock,   \* Redis' clock (mstime) ranges over 1 .. MaxClock
    MaxXAdds    \* CONSTRAINT: explore at most this many XADDs

ASSUME /\ Bits \in 1..22
       /\ SeqMax >= 2^Bits
       /\ MaxClock \in Nat \ {0}
       /\ MaxXAdds \in Nat

VARIABLES
    clock,   \* Redis' wall clock in ms
    lastId,  \* the stream's last-generated id <<ms, seq>>; <<0, 0>> when new
    xadds    \* XADDs so far (bounds the model)

vars == <<clock, lastId, xadds>>

(* The id Redis assigns to `XADD key * ...` at time now after id last. *)
StarId(now, last) ==
    IF now > last[1] THEN <<now, 0>>
    ELSE IF last[2] < SeqMax THEN <<last[1], last[2] + 1>>
    ELSE <<last[1] + 1, 0>>

Init ==
    /\ clock \in 1..MaxClock
    /\ lastId = <<0, 0>>
    /\ xadds = 0

XAddStar ==
    /\ lastId' = StarId(clock, lastId)
    /\ xadds' = xadds + 1
    /\ UNCHANGED clock

(* The clock jumps to any other value, forwards or back. *)
Tick ==
    /\ \E t \in (1..MaxClock) \ {clock} : clock' = t
    /\ UNCHANGED <<lastId, xadds>>

Next == XAddStar \/ Tick

Spec == Init /\ [][Next]_vars

StateConstraint == xadds <= MaxXAdds

TypeOK ==
    /\ clock \in 1..MaxClock
    /\ lastId \in Nat \X (0..SeqMax)
    /\ xadds \in Nat

(* The seed's claim: Redis keeps the sequence below 2^Bits (by moving to   *)
(* the next millisecond), so every id it generates has an offset.          *)
SeedClaim_SeqFitsBits == lastId[2] < 2^Bits

=============================================================================
