-------------------------- MODULE CoordinatorLease --------------------------
(***************************************************************************)
(* Several brokers on one Redis: who coordinates a consumer group.         *)
(*                                                                         *)
(* A group's coordinator is the broker holding the group's lease, a record *)
(* in Redis (owner, fencing token, expiry in Redis' own clock). Acquiring  *)
(* a free, expired or own (a restarted process of the same broker id)      *)
(* lease is one script that raises the token and returns the group's       *)
(* durable snapshot: the new owner continues from it. Every write of the   *)
(* group's snapshot and committed offsets carries the writer's token and   *)
(* Redis applies it only if the token is still the lease's (one script).   *)
(*                                                                         *)
(* Brokers measure time with clocks that are off Redis' clock by at most   *)
(* Drift; a broker believes it holds the lease until its own clock reaches *)
(* its grant or renewal time plus TTL minus Margin. Writes travel through  *)
(* `net`: delayed, reordered, lost; a broker waits for its write's answer  *)
(* before its next step (the adapter persists before it replies) but may   *)
(* give up waiting, and then drops the lease (its write may still land:    *)
(* only a new token makes it harmless). Brokers crash at any time.         *)
(*                                                                         *)
(* The coordinator itself is abstracted to what ownership can break: a     *)
(* generation with an assignment of partitions to members (a rebalance),   *)
(* and one committed offset that clients only move forwards. A client     *)
(* sees an assignment only once its write was accepted (no reply before    *)
(* the state is durable), so `assigned` records accepted assignments.     *)
(* With Fenced = FALSE, Redis applies every write: TLC then finds a stale  *)
(* owner overwriting the new owner's state.                                *)
(***************************************************************************)
EXTENDS Naturals, Integers, FiniteSets

CONSTANTS Brokers, Members, Partitions, TTL, Drift, Margin,
          MaxTime, MaxToken, MaxGen, MaxOffset, Fenced

NoBroker == "none"
NoMember == "nobody"
NoHeld == [token |-> 0, until |-> 0]
Assignments == [Partitions -> Members]
Nobody == [p \in Partitions |-> NoMember]
Empty == [loaded |-> FALSE, gen |-> 0, assign |-> Nobody, committed |-> 0]

VARIABLES now,       \* Redis' clock
          off,       \* each broker's clock minus Redis' clock, within -Drift..Drift
          lease,     \* the group's lease record in Redis
          held,      \* what each broker believes it holds: token (0: none) and local deadline
          mem,       \* each broker's in-memory copy of the group (loaded when it owns it)
          saved,     \* the group's durable snapshot and committed offset in Redis
          net,       \* writes sent and not yet applied or lost
          accepted,  \* ghost: <<token, broker>> of every accepted write
          assigned,  \* ghost: <<generation, partition, member>> of every accepted assignment
          highToken, \* ghost: the highest token accepted so far
          regress    \* ghost: an accepted write moved the token, generation or offset back

vars == <<now, off, lease, held, mem, saved, net, accepted, assigned, highToken, regress>>

Local(b) == now + off[b]
Believes(b) == held[b].token # 0 /\ Local(b) < held[b].until
Waiting(b) == \E w \in net : w.from = b /\ w.token = held[b].token
Owns(b) == Believes(b) /\ ~Waiting(b) /\ mem[b].loaded
Write(b, copy) == [from |-> b, token |-> held[b].token, gen |-> copy.gen,
                   assign |-> copy.assign, committed |-> copy.committed]
Drop(b) == /\ held' = [held EXCEPT ![b] = NoHeld]
           /\ mem' = [mem EXCEPT ![b] = Empty]

Init == /\ now = 0
        /\ off = [b \in Brokers |-> 0]
        /\ lease = [owner |-> NoBroker, token |-> 0, expires |-> 0]
        /\ held = [b \in Brokers |-> NoHeld]
        /\ mem = [b \in Brokers |-> Empty]
        /\ saved = [gen |-> 0, assign |-> Nobody, committed |-> 0]
        /\ net = {}
        /\ accepted = {}
        /\ assigned = {}
        /\ highToken = 0
        /\ regress = FALSE

\* Redis' clock moves on.
Tick == /\ now < MaxTime
        /\ now' = now + 1
        /\ UNCHANGED <<off, lease, held, mem, saved, net, accepted, assigned, highToken, regress>>

\* A broker's clock wanders, within the bound.
Skew(b, d) == /\ d # off[b]
              /\ off' = [off EXCEPT ![b] = d]
              /\ UNCHANGED <<now, lease, held, mem, saved, net, accepted, assigned, highToken, regress>>

\* FindCoordinator (or a request) at a broker that does not hold the group: the
\* acquire script grants a free, expired or same-broker lease with the next token
\* and returns the durable snapshot in the same script.
Acquire(b) == /\ held[b].token = 0
              /\ lease.token < MaxToken
              /\ \/ lease.owner = NoBroker
                 \/ lease.expires <= now
                 \/ lease.owner = b
              /\ lease' = [owner |-> b, token |-> lease.token + 1, expires |-> now + TTL]
              /\ held' = [held EXCEPT ![b] = [token |-> lease.token + 1,
                                              until |-> Local(b) + TTL - Margin]]
              /\ mem' = [mem EXCEPT ![b] = [loaded |-> TRUE, gen |-> saved.gen,
                                            assign |-> saved.assign,
                                            committed |-> saved.committed]]
              /\ UNCHANGED <<now, off, saved, net, accepted, assigned, highToken, regress>>

\* The renewal script extends the lease of the token the broker holds.
Renew(b) == /\ Believes(b)
            /\ held[b].token = lease.token
            /\ lease' = [lease EXCEPT !.expires = now + TTL]
            /\ held' = [held EXCEPT ![b].until = Local(b) + TTL - Margin]
            /\ UNCHANGED <<now, off, mem, saved, net, accepted, assigned, highToken, regress>>

\* The renewal script answers that the token is no longer the lease's: the broker
\* forgets the group (and answers NOT_COORDINATOR from then on).
RenewRefused(b) == /\ held[b].token # 0
                   /\ held[b].token # lease.token
                   /\ Drop(b)
                   /\ UNCHANGED <<now, off, lease, saved, net, accepted, assigned, highToken, regress>>

\* The broker's own clock says its lease is over: it forgets the group.
LocalExpiry(b) == /\ held[b].token # 0
                  /\ Local(b) >= held[b].until
                  /\ Drop(b)
                  /\ UNCHANGED <<now, off, lease, saved, net, accepted, assigned, highToken, regress>>

\* The broker process dies (kill -9); writes it sent may still be on their way.
Crash(b) == /\ held[b] # NoHeld \/ mem[b] # Empty
            /\ Drop(b)
            /\ UNCHANGED <<now, off, lease, saved, net, accepted, assigned, highToken, regress>>

\* The coordinator rebalances: a new generation with some assignment.
Rebalance(b, a) == /\ Owns(b)
                   /\ mem[b].gen < MaxGen
                   /\ LET copy == [mem[b] EXCEPT !.gen = @ + 1, !.assign = a]
                      IN /\ mem' = [mem EXCEPT ![b] = copy]
                         /\ net' = net \cup {Write(b, copy)}
                   /\ UNCHANGED <<now, off, lease, held, saved, accepted, assigned, highToken, regress>>

\* A member commits the next offset.
Commit(b) == /\ Owns(b)
             /\ mem[b].committed < MaxOffset
             /\ LET copy == [mem[b] EXCEPT !.committed = @ + 1]
                IN /\ mem' = [mem EXCEPT ![b] = copy]
                   /\ net' = net \cup {Write(b, copy)}
             /\ UNCHANGED <<now, off, lease, held, saved, accepted, assigned, highToken, regress>>

\* The broker learns that it lost the group if its write carrying its current token
\* failed.
ForgetIf(b, c) == /\ held' = [held EXCEPT ![b] = IF c THEN NoHeld ELSE @]
                  /\ mem' = [mem EXCEPT ![b] = IF c THEN Empty ELSE @]

\* Redis runs the fenced write script and applies the write: its token is the lease's
\* (or, with Fenced = FALSE, whatever it is).
\* A broker has at most one write in flight per token: (sender, token) names a write.
InFlight(b, t) == \E w \in net : w.from = b /\ w.token = t
Msg(b, t) == CHOOSE w \in net : w.from = b /\ w.token = t

ApplyW(w) == /\ (~Fenced \/ w.token = lease.token)
             /\ net' = net \ {w}
             /\ saved' = [gen |-> w.gen, assign |-> w.assign, committed |-> w.committed]
             /\ accepted' = accepted \cup {<<w.token, w.from>>}
             /\ assigned' = assigned \cup {<<w.gen, p, w.assign[p]>> :
                                           p \in {q \in Partitions : w.assign[q] # NoMember}}
             /\ highToken' = IF w.token > highToken THEN w.token ELSE highToken
             /\ regress' = (regress \/ w.token < highToken \/ w.gen < saved.gen
                            \/ w.committed < saved.committed)
             /\ UNCHANGED <<now, off, lease, held, mem>>

\* The script refuses a write with a stale token; a broker still waiting for it learns
\* that it lost the group.
RefuseW(w) == /\ Fenced
              /\ w.token # lease.token
              /\ net' = net \ {w}
              /\ ForgetIf(w.from, held[w.from].token = w.token)
              /\ UNCHANGED <<now, off, lease, saved, accepted, assigned, highToken, regress>>

\* A write that never reaches Redis (the connection broke): its broker, if it still
\* waits for it, sees the error and drops the group.
LoseW(w) == /\ net' = net \ {w}
            /\ ForgetIf(w.from, held[w.from].token = w.token)
            /\ UNCHANGED <<now, off, lease, saved, accepted, assigned, highToken, regress>>

\* The write of broker b with token t reaches Redis, or is lost.
Apply(b, t) == InFlight(b, t) /\ ApplyW(Msg(b, t))
Refuse(b, t) == InFlight(b, t) /\ RefuseW(Msg(b, t))
Lose(b, t) == InFlight(b, t) /\ LoseW(Msg(b, t))

\* The broker stops waiting for its write's answer (timeout, broken connection): not
\* knowing whether it landed, it drops the group; its next grant has a new token.
GiveUp(b) == /\ held[b].token # 0
             /\ Waiting(b)
             /\ Drop(b)
             /\ UNCHANGED <<now, off, lease, saved, net, accepted, assigned, highToken, regress>>

Next == \/ Tick
        \/ \E b \in Brokers :
              \/ Acquire(b) \/ Renew(b) \/ RenewRefused(b) \/ LocalExpiry(b) \/ Crash(b)
              \/ Commit(b) \/ GiveUp(b)
              \/ \E a \in Assignments : Rebalance(b, a)
              \/ \E d \in -Drift..Drift : Skew(b, d)
        \/ \E b \in Brokers, t \in 1..MaxToken : Apply(b, t) \/ Refuse(b, t) \/ Lose(b, t)

Spec == Init /\ [][Next]_vars

----------------------------------------------------------------------------
TypeOK == /\ now \in 0..MaxTime
          /\ off \in [Brokers -> -Drift..Drift]
          /\ lease.owner \in Brokers \cup {NoBroker}
          /\ lease.token \in 0..MaxToken
          /\ held \in [Brokers -> [token : 0..MaxToken, until : Int]]
          /\ saved.gen \in 0..MaxGen /\ saved.committed \in 0..MaxOffset
          /\ highToken \in 0..MaxToken
          /\ regress \in BOOLEAN

\* At most one broker's writes are accepted per token.
OneWriterPerToken == \A x, y \in accepted : x[1] = y[1] => x[2] = y[2]

\* What makes (sender, token) name a write in `net`.
OneWritePerTokenInFlight ==
    \A w1, w2 \in net : w1.from = w2.from /\ w1.token = w2.token => w1 = w2

\* Accepted tokens never decrease, and neither do the generation and the committed
\* offset in Redis.
NeverBackwards == ~regress

\* Within a generation no partition is assigned to two members, across owner changes.
NoPartitionTwiceInAGeneration ==
    \A x, y \in assigned : x[1] = y[1] /\ x[2] = y[2] => x[3] = y[3]

\* The owner's copy is what Redis holds, while it believes it owns the group and
\* has no write in flight: a new owner continues from the durable snapshot.
OwnerCopyIsDurable ==
    \A b \in Brokers : Owns(b) /\ held[b].token = lease.token =>
        /\ mem[b].gen = saved.gen /\ mem[b].assign = saved.assign
        /\ mem[b].committed = saved.committed

\* With Margin covering the drift, two brokers never both believe they hold the
\* lease (a paused broker may still act on an old belief: fencing covers that).
AtMostOneBelieves == \A b1, b2 \in Brokers : Believes(b1) /\ Believes(b2) => b1 = b2
=============================================================================
