-------------------------- MODULE CoordinatorLease --------------------------
(***************************************************************************)
(* Several brokers on one Redis: who coordinates a consumer group.         *)
(*                                                                         *)
(* A group's coordinator is the broker holding the group's lease, a record *)
(* in Redis (owner, fencing token, expiry in Redis' own clock). Acquiring  *)
(* a free, expired or own (a restarted process of the same broker id)      *)
(* lease is one script that raises the token and returns the group's       *)
(* durable snapshot: the new owner continues from it. Every write the      *)
(* coordinator makes for the group (its snapshot and committed offsets,    *)
(* the deletion, the clean-up of a deleted group's data) carries the       *)
(* writer's token and Redis applies it only if the token is still the      *)
(* lease's (one script). A broker gives a lease back (Release) at a clean  *)
(* stop and once a deleted group is gone: the token stays, the expiry goes.*)
(*                                                                         *)
(* Brokers measure time with clocks that are off Redis' clock by at most   *)
(* Drift; a broker believes it holds the lease until its own clock reaches *)
(* its grant or renewal time plus TTL minus Margin. Writes travel through  *)
(* `net`: delayed, reordered, lost; a broker waits for its write's answer  *)
(* before its next step (the adapter persists before it replies) but may   *)
(* give up waiting, and then drops the lease (its write may still land:    *)
(* only a new token makes it harmless). Brokers crash at any time; a       *)
(* paused broker is one whose steps, and writes, come late.                *)
(*                                                                         *)
(* The coordinator itself is abstracted to what ownership can break: a     *)
(* generation with an assignment of partitions to members (a rebalance),   *)
(* one committed offset that clients only move forwards, and the group's  *)
(* life: DeleteGroups (or the expiry of its offsets) marks it Dead in one  *)
(* write, and its clean-up then removes what Redis holds of it in a second *)
(* write, after which the group starts anew. A new owner that finds the    *)
(* Dead group finishes the clean-up. `inc` counts a group's deletions (a   *)
(* ghost that tells one incarnation of a group id from the next). A client *)
(* sees an assignment only once its write was accepted (no reply before    *)
(* the state is durable), so `assigned` records accepted assignments.      *)
(* With Fenced = FALSE, Redis applies every write: TLC then finds a stale  *)
(* owner overwriting the new owner's state.                                *)
(***************************************************************************)
EXTENDS Naturals, Integers, FiniteSets, TLC

CONSTANTS Brokers, Members, Partitions, TTL, Drift, Margin,
          MaxTime, MaxToken, MaxGen, MaxOffset, MaxDeletes, Fenced

NoBroker == "none"
NoMember == "nobody"
NoHeld == [token |-> 0, until |-> 0]
Assignments == [Partitions -> Members]
Nobody == [p \in Partitions |-> NoMember]
\* What Redis holds of the group (`saved`), and what a write carries: its incarnation,
\* whether it is Dead (deleted, its clean-up pending), generation, assignment, offset.
\* A group with nothing in Redis is New: a clean-up leaves the next incarnation, new.
New(i) == [inc |-> i, dead |-> FALSE, gen |-> 0, assign |-> Nobody, committed |-> 0]
Fields(r) == [inc |-> r.inc, dead |-> r.dead, gen |-> r.gen, assign |-> r.assign,
              committed |-> r.committed]
\* A broker's copy of the group: `loaded` while it holds the group.
Loaded(r) == [loaded |-> TRUE, inc |-> r.inc, dead |-> r.dead, gen |-> r.gen,
              assign |-> r.assign, committed |-> r.committed]
Empty == [loaded |-> FALSE, inc |-> 0, dead |-> FALSE, gen |-> 0, assign |-> Nobody,
          committed |-> 0]

VARIABLES now,       \* Redis' clock
          off,       \* each broker's clock minus Redis' clock, within -Drift..Drift
          lease,     \* the group's lease record in Redis
          held,      \* what each broker believes it holds: token (0: none) and local deadline
          mem,       \* each broker's in-memory copy of the group (loaded when it owns it)
          saved,     \* the group's durable snapshot and committed offset in Redis
          net,       \* writes sent and not yet applied or lost
          foreign,   \* ghost: Redis accepted a write of another broker than the lease's owner
          assigned,  \* ghost: <<incarnation, generation, partition, member>> accepted
          highToken, \* ghost: the highest token accepted so far
          regress,   \* ghost: an accepted write moved the group back (see NeverBackwards)
          wiped      \* ghost: a clean-up removed data written after its group's deletion

vars == <<now, off, lease, held, mem, saved, net, foreign, assigned, highToken, regress,
          wiped>>
ghosts == <<foreign, assigned, highToken, regress, wiped>>

Local(b) == now + off[b]
Believes(b) == held[b].token # 0 /\ Local(b) < held[b].until
Waiting(b) == \E w \in net : w.from = b /\ w.token = held[b].token
Owns(b) == Believes(b) /\ ~Waiting(b) /\ mem[b].loaded
Write(b, copy, cleanup) == [from |-> b, token |-> held[b].token, cleanup |-> cleanup,
                            inc |-> copy.inc, dead |-> copy.dead, gen |-> copy.gen,
                            assign |-> copy.assign, committed |-> copy.committed]
\* The broker's step changes its copy and sends the write that makes it durable.
Send(b, copy, cleanup) == /\ mem' = [mem EXCEPT ![b] = copy]
                          /\ net' = net \cup {Write(b, copy, cleanup)}
Drop(b) == /\ held' = [held EXCEPT ![b] = NoHeld]
           /\ mem' = [mem EXCEPT ![b] = Empty]

Init == /\ now = 0
        /\ off = [b \in Brokers |-> 0]
        /\ lease = [owner |-> NoBroker, token |-> 0, expires |-> 0]
        /\ held = [b \in Brokers |-> NoHeld]
        /\ mem = [b \in Brokers |-> Empty]
        /\ saved = New(0)
        /\ net = {}
        /\ foreign = FALSE
        /\ assigned = {}
        /\ highToken = 0
        /\ regress = FALSE
        /\ wiped = FALSE

\* Redis' clock moves on.
Tick == /\ now < MaxTime
        /\ now' = now + 1
        /\ UNCHANGED <<off, lease, held, mem, saved, net, ghosts>>

\* A broker's clock wanders, within the bound.
Skew(b, d) == /\ d # off[b]
              /\ off' = [off EXCEPT ![b] = d]
              /\ UNCHANGED <<now, lease, held, mem, saved, net, ghosts>>

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
              /\ mem' = [mem EXCEPT ![b] = Loaded(saved)]
              /\ UNCHANGED <<now, off, saved, net, ghosts>>

\* The renewal script extends the lease of the token the broker holds.
Renew(b) == /\ Believes(b)
            /\ held[b].token = lease.token
            /\ lease' = [lease EXCEPT !.expires = now + TTL]
            /\ held' = [held EXCEPT ![b].until = Local(b) + TTL - Margin]
            /\ UNCHANGED <<now, off, mem, saved, net, ghosts>>

\* The renewal script answers that the token is no longer the lease's: the broker
\* forgets the group (and answers NOT_COORDINATOR from then on).
RenewRefused(b) == /\ held[b].token # 0
                   /\ held[b].token # lease.token
                   /\ Drop(b)
                   /\ UNCHANGED <<now, off, lease, saved, net, ghosts>>

\* The broker's own clock says its lease is over: it forgets the group, and cancels
\* what it had pending for it (a clean-up not yet sent is never sent).
LocalExpiry(b) == /\ held[b].token # 0
                  /\ Local(b) >= held[b].until
                  /\ Drop(b)
                  /\ UNCHANGED <<now, off, lease, saved, net, ghosts>>

\* The broker gives the lease back (a clean stop; a deleted group no longer needed):
\* the release script ends the lease of the token it holds at once (the token stays,
\* the next grant raises it).
Release(b) == /\ Owns(b)
              /\ lease' = IF lease.token = held[b].token THEN [lease EXCEPT !.expires = 0]
                          ELSE lease
              /\ Drop(b)
              /\ UNCHANGED <<now, off, saved, net, ghosts>>

\* The broker process dies (kill -9); writes it sent may still be on their way.
Crash(b) == /\ held[b] # NoHeld \/ mem[b] # Empty
            /\ Drop(b)
            /\ UNCHANGED <<now, off, lease, saved, net, ghosts>>

\* The coordinator rebalances: a new generation with some assignment.
Rebalance(b, a) == /\ Owns(b)
                   /\ ~mem[b].dead
                   /\ mem[b].gen < MaxGen
                   /\ Send(b, [mem[b] EXCEPT !.gen = @ + 1, !.assign = a], FALSE)
                   /\ UNCHANGED <<now, off, lease, held, saved, ghosts>>

\* A member commits the next offset.
Commit(b) == /\ Owns(b)
             /\ ~mem[b].dead
             /\ mem[b].committed < MaxOffset
             /\ Send(b, [mem[b] EXCEPT !.committed = @ + 1], FALSE)
             /\ UNCHANGED <<now, off, lease, held, saved, ghosts>>

\* DeleteGroups (or the periodic clean-up, for a group whose offsets expired): the group
\* is Dead, durably (the write of its Dead snapshot), before the reply.
Delete(b) == /\ Owns(b)
             /\ ~mem[b].dead
             /\ mem[b].inc < MaxDeletes
             /\ Send(b, [mem[b] EXCEPT !.dead = TRUE], FALSE)
             /\ UNCHANGED <<now, off, lease, held, saved, ghosts>>

\* The clean-up of a Dead group, by the broker that holds it (the one that deleted it,
\* or a new owner that found it Dead): one write removes what Redis holds of the group,
\* fenced like every other; once it is accepted the group starts anew.
CleanUp(b) == /\ Owns(b)
              /\ mem[b].dead
              /\ Send(b, Loaded(New(mem[b].inc + 1)), TRUE)
              /\ UNCHANGED <<now, off, lease, held, saved, ghosts>>

\* The broker learns that it lost the group if its write carrying its current token
\* failed.
ForgetIf(b, c) == /\ held' = [held EXCEPT ![b] = IF c THEN NoHeld ELSE @]
                  /\ mem' = [mem EXCEPT ![b] = IF c THEN Empty ELSE @]

\* A broker has at most one write in flight per token: (sender, token) names a write.
InFlight(b, t) == \E w \in net : w.from = b /\ w.token = t
Msg(b, t) == CHOOSE w \in net : w.from = b /\ w.token = t

\* Applying `w` moves the group back: an older token after a newer one, an older
\* incarnation after a newer one, a Dead group alive again, or within one incarnation
\* a lower generation or committed offset.
Backwards(w) == \/ w.token < highToken
                \/ w.inc < saved.inc
                \/ w.inc = saved.inc /\ saved.dead /\ ~w.dead
                \/ w.inc = saved.inc /\ (w.gen < saved.gen \/ w.committed < saved.committed)
\* Applying the clean-up `w` removes more than its Dead group: Redis holds neither that
\* group (incarnation w.inc - 1, Dead) nor already what the clean-up leaves.
Wipes(w) == /\ w.cleanup
            /\ ~(saved.dead /\ saved.inc + 1 = w.inc)
            /\ saved # Fields(w)

\* Redis runs the fenced write script and applies the write: its token is the lease's
\* (or, with Fenced = FALSE, whatever it is).
ApplyW(w) == /\ (~Fenced \/ w.token = lease.token)
             /\ net' = net \ {w}
             /\ saved' = Fields(w)
             /\ foreign' = (foreign \/ w.from # lease.owner)
             /\ assigned' = assigned \cup {<<w.inc, w.gen, p, w.assign[p]>> :
                                           p \in {q \in Partitions : w.assign[q] # NoMember}}
             /\ highToken' = IF w.token > highToken THEN w.token ELSE highToken
             /\ regress' = (regress \/ Backwards(w))
             /\ wiped' = (wiped \/ Wipes(w))
             /\ UNCHANGED <<now, off, lease, held, mem>>

\* The script refuses a write with a stale token; a broker still waiting for it learns
\* that it lost the group.
RefuseW(w) == /\ Fenced
              /\ w.token # lease.token
              /\ net' = net \ {w}
              /\ ForgetIf(w.from, held[w.from].token = w.token)
              /\ UNCHANGED <<now, off, lease, saved, ghosts>>

\* A write that never reaches Redis (the connection broke): its broker, if it still
\* waits for it, sees the error and drops the group.
LoseW(w) == /\ net' = net \ {w}
            /\ ForgetIf(w.from, held[w.from].token = w.token)
            /\ UNCHANGED <<now, off, lease, saved, ghosts>>

\* The write of broker b with token t reaches Redis, or is lost.
Apply(b, t) == InFlight(b, t) /\ ApplyW(Msg(b, t))
Refuse(b, t) == InFlight(b, t) /\ RefuseW(Msg(b, t))
Lose(b, t) == InFlight(b, t) /\ LoseW(Msg(b, t))

\* The broker stops waiting for its write's answer (timeout, broken connection): not
\* knowing whether it landed, it drops the group; its next grant has a new token.
GiveUp(b) == /\ held[b].token # 0
             /\ Waiting(b)
             /\ Drop(b)
             /\ UNCHANGED <<now, off, lease, saved, net, ghosts>>

Next == \/ Tick
        \/ \E b \in Brokers :
              \/ Acquire(b) \/ Renew(b) \/ RenewRefused(b) \/ LocalExpiry(b) \/ Release(b)
              \/ Crash(b) \/ Commit(b) \/ Delete(b) \/ CleanUp(b) \/ GiveUp(b)
              \/ \E a \in Assignments : Rebalance(b, a)
              \/ \E d \in -Drift..Drift : Skew(b, d)
        \/ \E b \in Brokers, t \in 1..MaxToken : Apply(b, t) \/ Refuse(b, t) \/ Lose(b, t)

Spec == Init /\ [][Next]_vars

\* Brokers are interchangeable, and so are members: a model may check one of each set of
\* states that differ only by their names (SYMMETRY; not where a replay walks the graph).
Symmetry == Permutations(Brokers) \cup Permutations(Members)

----------------------------------------------------------------------------
Data == [inc : 0..MaxDeletes, dead : BOOLEAN, gen : 0..MaxGen,
         assign : [Partitions -> Members \cup {NoMember}], committed : 0..MaxOffset]

\* Every expiry is Redis' clock plus TTL (or 0, released); a broker's deadline is its
\* own clock's; every write carries a token that was granted.
TypeOK == /\ now \in 0..MaxTime
          /\ off \in [Brokers -> -Drift..Drift]
          /\ lease \in [owner : Brokers \cup {NoBroker}, token : 0..MaxToken,
                        expires : 0..MaxTime + TTL]
          /\ held \in [Brokers -> [token : 0..MaxToken, until : Int]]
          /\ \A b \in Brokers : mem[b].loaded \in BOOLEAN /\ Fields(mem[b]) \in Data
          /\ saved \in Data
          /\ \A w \in net : /\ w.from \in Brokers /\ w.token \in 1..MaxToken
                            /\ w.cleanup \in BOOLEAN /\ Fields(w) \in Data
          /\ highToken \in 0..MaxToken
          /\ foreign \in BOOLEAN /\ regress \in BOOLEAN /\ wiped \in BOOLEAN

\* While one token is the lease's, Redis accepts the writes of one broker only: that
\* token's grantee, the lease's owner. Fencing, not the uniqueness of grants alone, makes
\* it hold: without the check a former owner's write lands under the new owner's token.
OneWriterPerToken == ~foreign

\* What makes (sender, token) name a write in `net`.
OneWritePerTokenInFlight ==
    \A w1, w2 \in net : w1.from = w2.from /\ w1.token = w2.token => w1 = w2

\* Accepted writes never move the group back: tokens never decrease; a deleted group
\* stays deleted (its stale writes never bring it back), and within one incarnation the
\* generation and the committed offset in Redis never decrease.
NeverBackwards == ~regress

\* A clean-up removes only its Dead group: never what an owner wrote after the group was
\* deleted (a new owner's offsets and snapshot of the group started anew).
CleanUpRemovesOnlyTheDeletedGroup == ~wiped

\* Within a generation of one incarnation no partition is assigned to two members,
\* across owner changes.
NoPartitionTwiceInAGeneration ==
    \A x, y \in assigned : x[1] = y[1] /\ x[2] = y[2] /\ x[3] = y[3] => x[4] = y[4]

\* The owner's copy is what Redis holds, while it believes it owns the group and
\* has no write in flight: a new owner continues from the durable snapshot.
OwnerCopyIsDurable ==
    \A b \in Brokers : Owns(b) /\ held[b].token = lease.token => Fields(mem[b]) = saved

\* With Margin covering the drift, two brokers never both believe they hold the
\* lease (a paused broker may still act on an old belief: fencing covers that).
AtMostOneBelieves == \A b1, b2 \in Brokers : Believes(b1) /\ Believes(b2) => b1 = b2
=============================================================================
