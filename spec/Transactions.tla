----------------------------- MODULE Transactions -----------------------------
(***************************************************************************)
(* Kafka transactions (exactly-once) on Redis: the transaction coordinator, *)
(* the markers, the partitions' producer state, the last stable offset    *)
(* (LSO), the aborted index, transactional offset commits and             *)
(* read_committed readers (issue 32). Written before the code; the design *)
(* it fixes is docs/spec/transactions.md.                                  *)
(*                                                                         *)
(* The client protocol is transactions v2 (KIP-890 part 2, Kafka 4.x with  *)
(* transaction.version 2): a Produce (v12) or TxnOffsetCommit (v5) adds   *)
(* its partition or group to the transaction itself, and EndTxn (v5)      *)
(* bumps the producer epoch when it decides, so the decision, its markers *)
(* and the next transaction all carry a newer epoch than the data of the  *)
(* one decided.                                                            *)
(*                                                                         *)
(* Korvet's shape. A transactional id t has one durable record in its own *)
(* Redis Cluster slot (`coord[t]`, Kafka's TransactionLogValue) and a     *)
(* fenced lease whose token is the coordinator epoch (spec               *)
(* CoordinatorLease.tla checks the lease itself; here a takeover is one   *)
(* step that raises the token, and the former holder may go on acting on *)
(* what it read until it learns). Every coordinator transition is one    *)
(* script on that slot, so a decision is durable before anyone is        *)
(* answered. A partition lives in its own slot: EndTxn cannot write it in *)
(* the same script, so it is Kafka's shape: the durable decision          *)
(* (PrepareCommit, PrepareAbort), then one marker script per participant, *)
(* idempotent, then the completion (CompleteCommit, CompleteAbort) once   *)
(* every participant acknowledged.                                         *)
(*                                                                         *)
(* The network delays, duplicates and loses: data writes, EndTxn requests *)
(* and markers travel through `net` (a set: a message may be delivered    *)
(* and kept there, a duplicate for later, within MaxDup; or lost, or its  *)
(* answer lost, within MaxLoss). InitProducerId and the implicit add are *)
(* applied when sent (their late copies are left out: see the doc).       *)
(* Time: each transactional id's timer (`age` in its record) counts ticks *)
(* since its transaction started (the timeout) or since its last update   *)
(* (transactional.id.expiration.ms).                                       *)
(*                                                                         *)
(* Ghosts name the client's own transactions: <<c, k>> is client c's k-th *)
(* (k = 0 names none), so the invariants speak of what a producer meant  *)
(* as one transaction, not of what the coordinator thinks it is.          *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets, TLC

CONSTANTS
    TxnIds,       \* transactional ids
    Instances,    \* producer instances per transactional id (two: a zombie and its successor)
    Partitions,   \* data partitions
    Group,        \* the consumer group whose offsets transactions commit
    MaxEpoch,     \* producer epochs 0..MaxEpoch (Kafka: Short.MAX_VALUE)
    MaxPid,       \* producer ids 1..MaxPid
    MaxToken,     \* coordinator epochs (lease tokens) 1..MaxToken
    Timeout,      \* transaction.timeout.ms, in ticks
    ExpireAfter,  \* transactional.id.expiration.ms, in ticks (0: ids never expire, a model bound)
    MaxMoves,     \* the clients' steps in a behaviour (all clients together)
    MaxLoss,      \* messages or answers lost in a behaviour
    MaxDup,       \* messages duplicated in a behaviour
    MaxTrims      \* DeleteRecords calls in a behaviour

ASSUME /\ MaxEpoch \in Nat /\ MaxPid \in Nat \ {0} /\ MaxToken \in Nat \ {0}
       /\ Timeout \in Nat \ {0} /\ ExpireAfter \in Nat
       /\ MaxMoves \in Nat /\ MaxLoss \in Nat /\ MaxDup \in Nat /\ MaxTrims \in Nat
       /\ Group \notin Partitions

Clients == TxnIds \X Instances
Participants == Partitions \cup {Group}
Pids == 1..MaxPid
\* No transaction (no client is named so: symmetry keeps the names interchangeable).
NoClient == <<"none", "none">>
NoTxn == <<NoClient, 0>>
Results == {"COMMIT", "ABORT"}
Ending == {"PrepareCommit", "PrepareAbort"}
Complete == {"CompleteCommit", "CompleteAbort"}
Idle == {"Empty"} \cup Complete
Outcome(s) == IF s \in {"PrepareCommit", "CompleteCommit"} THEN "COMMIT" ELSE "ABORT"
Prepare(r) == IF r = "COMMIT" THEN "PrepareCommit" ELSE "PrepareAbort"
Finish(s) == IF s = "PrepareCommit" THEN "CompleteCommit" ELSE "CompleteAbort"
Min(S) == CHOOSE x \in S : \A y \in S : x <= y

\* The epoch bump of EndTxn under transactions v2 (KIP-890 part 2): the decision's epoch
\* is the transaction's plus DecisionBump, and a retried EndTxn is recognised by it.
DecisionBump == 1

\* A transactional id with no record (never used, or expired).
NoRecord == [state |-> "None", pid |-> 0, epoch |-> -1, parts |-> {}, txn |-> NoTxn, age |-> 0]
\* A participant's state of one producer id (the partition's meta hash `p:<id>`; for the
\* group, its hash): the last epoch seen, the epoch of the last marker applied, the
\* coordinator epoch of that marker, the first offset of the open transaction (-1: none;
\* partitions only) and the open transaction (a ghost on partitions; on the group, the
\* pending offsets: which transaction wrote them).
NoProducer == [epoch |-> -1, mark |-> -1, ce |-> 0, first |-> -1, open |-> NoTxn]
NewClient == [st |-> "init", pid |-> 0, epoch |-> -1, k |-> 1, sent |-> {}, acked |-> {},
              bad |-> FALSE, want |-> "COMMIT"]

VARIABLES
    coord,      \* coord[t]: transactional id t's durable record
    nextPid,    \* the producer id the next allocation hands out
    lease,      \* lease[t]: t's coordinator epoch (the lease token)
    live,       \* live[t]: the tokens whose coordinator process still acts on t
    ackd,       \* ackd[t]: participants whose marker the current coordinator heard applied
    cli,        \* cli[c]: client instance c
    net,        \* messages in flight
    log,        \* log[p]: partition p's records, offset o at index o + 1 (dense)
    start,      \* start[p]: p's log start offset
    ps,         \* ps[q][x]: participant q's state of producer id x
    aborted,    \* aborted[p]: p's aborted index, [pid, first, last] per aborted transaction
    committed,  \* the group's committed offset, as the transaction that wrote it (OffsetFetch)
    decisions,  \* ghost: every durable decision [txn, pid, epoch, result]
    asked,      \* ghost: the transactions whose producer sent EndTxn(commit)
    fate,       \* ghost: [txn, q, result] each time a marker ended txn's records at q
    grants,     \* ghost: [pid, epoch, c] each producer epoch handed to client c
    moves,      \* the clients' steps so far
    faults,     \* [loss, dup]: network faults so far
    trims       \* DeleteRecords calls so far

vars == <<coord, nextPid, lease, live, ackd, cli, net, log, start, ps, aborted, committed,
          decisions, asked, fate, grants, moves, faults, trims>>
coordVars == <<coord, nextPid, lease, live, ackd>>
partVars == <<log, start, ps, aborted, committed>>
ghosts == <<decisions, asked, fate, grants>>

\* One shape for every message: data (a Produce's records or a TxnOffsetCommit's offsets
\* to participant `to`), EndTxn from client c, a marker for participant `to`.
Msg(type, to, c, pid, epoch, ce, result, txn) ==
    [type |-> type, to |-> to, c |-> c, pid |-> pid, epoch |-> epoch, ce |-> ce,
     result |-> result, txn |-> txn]

HW(p) == Len(log[p])
\* The last stable offset: the first offset of the oldest open transaction, else the high
\* watermark; never below the log start (retention may remove an open transaction's head).
LSO(p) == LET firsts == {ps[p][x].first : x \in Pids} \ {-1}
          IN  IF firsts = {} THEN HW(p)
              ELSE IF Min(firsts) < start[p] THEN start[p] ELSE Min(firsts)

Init ==
    /\ coord = [t \in TxnIds |-> NoRecord]
    /\ nextPid = 1
    /\ lease = [t \in TxnIds |-> 1]
    /\ live = [t \in TxnIds |-> {1}]
    /\ ackd = [t \in TxnIds |-> {}]
    /\ cli = [c \in Clients |-> NewClient]
    /\ net = {}
    /\ log = [p \in Partitions |-> <<>>]
    /\ start = [p \in Partitions |-> 0]
    /\ ps = [q \in Participants |-> [x \in Pids |-> NoProducer]]
    /\ aborted = [p \in Partitions |-> {}]
    /\ committed = NoTxn
    /\ decisions = {} /\ asked = {} /\ fate = {} /\ grants = {}
    /\ moves = 0 /\ faults = [loss |-> 0, dup |-> 0] /\ trims = 0

Move == moves < MaxMoves /\ moves' = moves + 1

\* A delivery takes the message off the network, or leaves a duplicate for later (`keep`);
\* its answer may be lost (`lost`). Both within the model's budget.
Deliver(m, keep, lost) ==
    /\ m \in net
    /\ keep => faults.dup < MaxDup
    /\ lost => faults.loss < MaxLoss
    /\ net' = IF keep THEN net ELSE net \ {m}
    /\ faults' = [loss |-> faults.loss + (IF lost THEN 1 ELSE 0),
                  dup |-> faults.dup + (IF keep THEN 1 ELSE 0)]

\* The client starts over (a new producer instance's session): after a fatal error, its
\* next transaction is a new one.
Restart(c) == [NewClient EXCEPT !.k = cli[c].k + 1]

-----------------------------------------------------------------------------
(* The coordinator's transitions, each one script on the transactional id's slot. *)

\* The next epoch InitProducerId hands out; a new producer id when the epoch is exhausted
\* (Kafka: epoch >= Short.MAX_VALUE - 1, so a fence can still bump once).
Exhausted(e) == e + 1 >= MaxEpoch

\* InitProducerId(t) from client c: a new record gets a new producer id at epoch 0; an idle
\* one the next epoch (or a new id); an open transaction is fenced: its epoch bumped and
\* aborted, and the client told CONCURRENT_TRANSACTIONS (it retries and then gets the
\* epoch after). A transaction being decided: CONCURRENT_TRANSACTIONS (the client waits).
ClientInit(c) ==
    LET t == c[1]
        cs == coord[t]
        fresh == cs.state = "None" \/ (cs.state \in Idle /\ Exhausted(cs.epoch))
        pid == IF fresh THEN nextPid ELSE cs.pid
        epoch == IF fresh THEN 0 ELSE cs.epoch + 1
    IN
    \* A client whose epoch reached the model's bound starts over too (Kafka would hand it
    \* a new producer id at the decision: TV2's overflow, left out).
    /\ \/ cli[c].st = "init"
       \/ cli[c].st = "ready" /\ cli[c].epoch = MaxEpoch
    /\ Move
    /\ \/ /\ cs.state \in {"None"} \cup Idle
          /\ fresh => nextPid <= MaxPid
          /\ nextPid' = IF fresh THEN nextPid + 1 ELSE nextPid
          /\ coord' = [coord EXCEPT ![t] = [state |-> "Empty", pid |-> pid, epoch |-> epoch,
                                            parts |-> {}, txn |-> NoTxn, age |-> 0]]
          /\ grants' = grants \cup {[pid |-> pid, epoch |-> epoch, c |-> c]}
          /\ \E lost \in BOOLEAN :
               /\ lost => faults.loss < MaxLoss
               /\ faults' = [faults EXCEPT !.loss = @ + (IF lost THEN 1 ELSE 0)]
               /\ cli' = IF lost THEN cli
                         ELSE [cli EXCEPT ![c] = [@ EXCEPT !.st = "ready", !.pid = pid,
                                                           !.epoch = epoch]]
          /\ UNCHANGED <<decisions, ackd>>
       \/ /\ cs.state = "Ongoing"
          /\ coord' = [coord EXCEPT ![t] = [cs EXCEPT !.state = "PrepareAbort",
                                                      !.epoch = cs.epoch + 1, !.age = 0]]
          /\ decisions' = decisions \cup {[txn |-> cs.txn, pid |-> cs.pid,
                                           epoch |-> cs.epoch + 1, result |-> "ABORT"]}
          /\ ackd' = [ackd EXCEPT ![t] = {}]
          /\ UNCHANGED <<nextPid, grants, cli, faults>>
    /\ UNCHANGED <<lease, live, net, partVars, asked, fate, trims>>

\* Produce v12 to partition q, or TxnOffsetCommit v5 to the group q, inside the client's
\* transaction: the broker adds q to the transaction (KIP-890 part 2's implicit
\* AddPartitionsToTxn: one script on t's slot, the transaction starting if idle), and only
\* once that is durable sends the write itself. An add refused for the producer's epoch or
\* id fails the client (PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING: it starts over); a
\* transaction being decided makes the client wait (CONCURRENT_TRANSACTIONS). Epochs stop
\* at MaxEpoch in the model: a client at MaxEpoch re-initialises (see the doc).
ClientWrite(c, q) ==
    LET t == c[1]
        cs == coord[t]
        me == cli[c]
        x == <<c, me.k>>
    IN
    /\ me.st \in {"ready", "txn"}
    /\ q \notin me.sent \cup me.acked
    /\ Move
    /\ IF cs.state = "None" \/ cs.pid # me.pid \/ cs.epoch # me.epoch
         THEN /\ cli' = [cli EXCEPT ![c] = Restart(c)]
              /\ UNCHANGED <<coord, net>>
         ELSE /\ cs.state \in {"Ongoing"} \cup Idle
              /\ me.epoch < MaxEpoch
              /\ coord' = [coord EXCEPT ![t] =
                             IF cs.state = "Ongoing" THEN [cs EXCEPT !.parts = @ \cup {q}]
                             ELSE [cs EXCEPT !.state = "Ongoing", !.parts = {q}, !.txn = x,
                                             !.age = 0]]
              /\ net' = net \cup {Msg("data", q, c, me.pid, me.epoch, 0, "", x)}
              /\ cli' = [cli EXCEPT ![c] = [me EXCEPT !.st = "txn", !.sent = @ \cup {q}]]
    /\ UNCHANGED <<nextPid, lease, live, ackd, partVars, ghosts, faults, trims>>

\* EndTxn: the client commits only when every write of its transaction was acknowledged.
ClientEnd(c, r) ==
    LET me == cli[c] IN
    /\ me.st = "txn"
    /\ r = "COMMIT" => me.sent = {} /\ ~me.bad
    /\ Move
    /\ net' = net \cup {Msg("end", Group, c, me.pid, me.epoch, 0, r, <<c, me.k>>)}
    /\ cli' = [cli EXCEPT ![c] = [me EXCEPT !.st = "ending", !.want = r]]
    /\ asked' = IF r = "COMMIT" THEN asked \cup {<<c, me.k>>} ELSE asked
    /\ UNCHANGED <<coordVars, partVars, decisions, fate, grants, faults, trims>>

\* No answer came: the client sends its EndTxn again (the first may still be on its way).
ClientRetryEnd(c) ==
    LET me == cli[c]
        m == Msg("end", Group, c, me.pid, me.epoch, 0, me.want, <<c, me.k>>)
    IN
    /\ me.st = "ending"
    /\ m \notin net
    /\ Move
    /\ net' = net \cup {m}
    /\ UNCHANGED <<coordVars, cli, partVars, ghosts, faults, trims>>

EndVerdict(cs, m) ==
    IF cs.state = "None" \/ cs.pid # m.pid THEN "INVALID_PRODUCER_ID_MAPPING"
    ELSE IF cs.state = "Ongoing" /\ cs.epoch = m.epoch THEN "PREPARE"
    ELSE IF cs.state \in Ending \cup Complete /\ cs.epoch = m.epoch + DecisionBump
      THEN IF Outcome(cs.state) # m.result THEN "INVALID_TXN_STATE"
           ELSE IF cs.state \in Ending THEN "CONCURRENT_TRANSACTIONS" ELSE "NONE"
    ELSE "PRODUCER_FENCED"

\* The coordinator handles an EndTxn (a first request, a retry, or a late copy of either):
\* in Ongoing with the transaction's epoch it decides, durably, with the epoch bumped, and
\* answers at once (markers follow); a retry of a decided transaction (its epoch + 1) gets
\* CONCURRENT_TRANSACTIONS until the decision is complete, then NONE; the other result,
\* INVALID_TXN_STATE; anything else is fenced. The client listens only for the answer to
\* its current transaction.
EndTxnArrives(m, keep, lost) ==
    LET t == m.c[1]
        cs == coord[t]
        v == EndVerdict(cs, m)
        newEpoch == cs.epoch + DecisionBump
        waiting == cli[m.c].st = "ending" /\ cli[m.c].k = m.txn[2] /\ ~lost
        client == cli[m.c]
    IN
    /\ m.type = "end"
    /\ Deliver(m, keep, lost)
    /\ IF v = "PREPARE"
         THEN /\ coord' = [coord EXCEPT ![t] = [cs EXCEPT !.state = Prepare(m.result),
                                                          !.epoch = newEpoch, !.age = 0]]
              /\ decisions' = decisions \cup {[txn |-> cs.txn, pid |-> cs.pid,
                                               epoch |-> newEpoch, result |-> m.result]}
              /\ grants' = grants \cup {[pid |-> cs.pid, epoch |-> newEpoch, c |-> m.c]}
              /\ ackd' = [ackd EXCEPT ![t] = {}]
         ELSE UNCHANGED <<coord, decisions, grants, ackd>>
    /\ cli' = IF ~waiting THEN cli
              ELSE IF v \in {"PREPARE", "NONE"}
                THEN [cli EXCEPT ![m.c] = [NewClient EXCEPT !.st = "ready", !.pid = client.pid,
                                             !.epoch = IF v = "PREPARE" THEN newEpoch
                                                       ELSE cs.epoch,
                                             !.k = client.k + 1]]
              ELSE IF v = "CONCURRENT_TRANSACTIONS" THEN cli
              ELSE [cli EXCEPT ![m.c] = Restart(m.c)]
    /\ UNCHANGED <<nextPid, lease, live, partVars, asked, fate, moves, trims>>

\* transaction.timeout.ms: an open transaction whose timer ran out is fenced (its epoch
\* bumped, so its producer's late writes and requests are refused) and aborted.
TimeoutAbort(t) ==
    LET cs == coord[t] IN
    /\ cs.state = "Ongoing"
    /\ cs.age >= Timeout
    /\ coord' = [coord EXCEPT ![t] = [cs EXCEPT !.state = "PrepareAbort", !.epoch = cs.epoch + 1,
                                                !.age = 0]]
    /\ decisions' = decisions \cup {[txn |-> cs.txn, pid |-> cs.pid, epoch |-> cs.epoch + 1,
                                     result |-> "ABORT"]}
    /\ ackd' = [ackd EXCEPT ![t] = {}]
    /\ UNCHANGED <<nextPid, lease, live, cli, net, partVars, asked, fate, grants, moves, faults,
                   trims>>

\* transactional.id.expiration.ms: an idle transactional id not used for that long is
\* removed (Kafka: Dead, then deleted); its next InitProducerId gets a new producer id.
Expire(t) ==
    /\ ExpireAfter > 0
    /\ coord[t].state \in Idle
    /\ coord[t].age >= ExpireAfter
    /\ coord' = [coord EXCEPT ![t] = NoRecord]
    /\ UNCHANGED <<nextPid, lease, live, ackd, cli, net, partVars, ghosts, moves, faults, trims>>

\* Time passes for t's timer (each id's timer moves on its own: any interleaving of the
\* clocks' ticks is allowed).
Tick(t) ==
    /\ \/ coord[t].state = "Ongoing" /\ coord[t].age < Timeout
       \/ coord[t].state \in Idle /\ coord[t].age < ExpireAfter   \* (0: no timer)
    /\ coord' = [coord EXCEPT ![t].age = @ + 1]
    /\ UNCHANGED <<nextPid, lease, live, ackd, cli, net, partVars, ghosts, moves, faults, trims>>

\* A coordinator process holding token `tok` (the current one, or a former holder that
\* has not yet learnt it lost the lease) reads t's decision and sends participant q its
\* marker: the decision's producer id, epoch and result, and its own coordinator epoch.
\* The current holder sends to participants it has no acknowledgement from, again after
\* a lost answer.
SendMarkerTo(t, q, tok) ==
    LET cs == coord[t]
        m == Msg("marker", q, <<t, "coordinator">>, cs.pid, cs.epoch, tok,
                 Outcome(cs.state), cs.txn)
    IN
    /\ tok \in live[t]
    /\ cs.state \in Ending
    /\ q \in cs.parts
    /\ tok = lease[t] => q \notin ackd[t]
    /\ m \notin net
    /\ net' = net \cup {m}
    /\ UNCHANGED <<coordVars, cli, partVars, ghosts, moves, faults, trims>>

\* Every participant acknowledged: the transaction is complete (one script, fenced).
CompleteTxn(t) ==
    LET cs == coord[t] IN
    /\ cs.state \in Ending
    /\ cs.parts \subseteq ackd[t]
    /\ coord' = [coord EXCEPT ![t] = [cs EXCEPT !.state = Finish(cs.state), !.parts = {},
                                                !.age = 0]]
    /\ ackd' = [ackd EXCEPT ![t] = {}]
    /\ UNCHANGED <<nextPid, lease, live, cli, net, partVars, ghosts, moves, faults, trims>>

\* The lease moves to another broker (the holder's lease expired, it stopped, or it lost
\* Redis): a higher token; the new holder knows of no acknowledgement and sends every
\* marker of a pending decision again. The former holder may still act until it learns.
Takeover(t) ==
    /\ lease[t] < MaxToken
    /\ lease' = [lease EXCEPT ![t] = @ + 1]
    /\ live' = [live EXCEPT ![t] = @ \cup {lease[t] + 1}]
    /\ ackd' = [ackd EXCEPT ![t] = {}]
    /\ UNCHANGED <<coord, nextPid, cli, net, partVars, ghosts, moves, faults, trims>>

\* A former holder learns it lost the lease (its renewal refused, its clock) and stops.
RetireToken(t, tok) ==
    /\ tok \in live[t]
    /\ tok < lease[t]
    /\ live' = [live EXCEPT ![t] = @ \ {tok}]
    /\ UNCHANGED <<coord, nextPid, lease, ackd, cli, net, partVars, ghosts, moves, faults, trims>>

-----------------------------------------------------------------------------
(* The participants' side: one script on the partition's (or the group's) slot. *)

\* A transactional write is checked in the script that appends it, against the state the
\* same slot holds: an epoch older than the producer's last one there is refused
\* (INVALID_PRODUCER_EPOCH). A marker raises that epoch, so a write of a decided
\* transaction arriving after its marker never reopens it.
DataAccepted(q, m) == m.epoch >= ps[q][m.pid].epoch

\* The write lands: on a partition a data record (the first one of a producer opens its
\* transaction there, at its offset); on the group the offsets are pending for the
\* producer id, invisible to OffsetFetch.
ApplyData(q, m) ==
    LET st == ps[q][m.pid] IN
    /\ ps' = [ps EXCEPT ![q][m.pid] =
                [st EXCEPT !.epoch = m.epoch,
                           !.first = IF q = Group THEN -1
                                     ELSE IF st.first = -1 THEN HW(q) ELSE st.first,
                           !.open = IF q = Group \/ st.first = -1 THEN m.txn ELSE st.open]]
    /\ log' = IF q = Group THEN log
              ELSE [log EXCEPT ![q] = Append(@, [kind |-> "data", pid |-> m.pid,
                                                  epoch |-> m.epoch, txn |-> m.txn])]
    /\ UNCHANGED <<start, aborted, committed>>

DataArrives(m, keep, lost) ==
    LET q == m.to
        ok == DataAccepted(q, m)
        waiting == cli[m.c].st = "txn" /\ cli[m.c].k = m.txn[2] /\ ~lost
    IN
    /\ m.type = "data"
    /\ Deliver(m, keep, lost)
    /\ IF ok THEN ApplyData(q, m) ELSE UNCHANGED partVars
    /\ cli' = IF ~waiting THEN cli
              ELSE [cli EXCEPT ![m.c].sent = @ \ {q},
                               ![m.c].acked = IF ok THEN @ \cup {q} ELSE @,
                               ![m.c].bad = @ \/ ~ok]
    /\ UNCHANGED <<coordVars, ghosts, moves, trims>>

\* The marker script's verdict (Kafka's ProducerAppendInfo rules): a coordinator epoch
\* older than the last marker's is fenced (TRANSACTION_COORDINATOR_FENCED); under
\* transactions v2 a marker's epoch must be newer than the producer's (KIP-1228); the same
\* marker again (its epoch is the last marker's) is acknowledged and changes nothing.
MarkerVerdict(q, m) ==
    LET st == ps[q][m.pid] IN
    IF m.ce < st.ce THEN "COORDINATOR_FENCED"
    ELSE IF m.epoch > st.epoch THEN "APPLY"
    ELSE IF m.epoch = st.epoch /\ st.mark = m.epoch THEN "DUPLICATE"
    ELSE "INVALID_PRODUCER_EPOCH"

\* The marker lands: it ends the producer's open transaction at q, if there is one. On a
\* partition it is a control record at the next offset, and an abort adds the transaction
\* to the aborted index; on the group a commit makes the pending offsets the committed
\* ones, an abort drops them.
ApplyMarker(q, m) ==
    LET st == ps[q][m.pid]
        open == st.open # NoTxn
    IN
    /\ ps' = [ps EXCEPT ![q][m.pid] = [epoch |-> m.epoch, mark |-> m.epoch, ce |-> m.ce,
                                       first |-> -1, open |-> NoTxn]]
    /\ fate' = IF open THEN fate \cup {[txn |-> st.open, q |-> q, result |-> m.result]}
               ELSE fate
    /\ IF q = Group
         THEN /\ committed' = IF open /\ m.result = "COMMIT" THEN st.open ELSE committed
              /\ UNCHANGED <<log, aborted>>
         ELSE /\ log' = [log EXCEPT ![q] = Append(@, [kind |-> m.result, pid |-> m.pid,
                                                       epoch |-> m.epoch, txn |-> m.txn])]
              /\ aborted' = IF open /\ m.result = "ABORT"
                              THEN [aborted EXCEPT ![q] = @ \cup {[pid |-> m.pid,
                                      first |-> st.first, last |-> HW(q)]}]
                              ELSE aborted
              /\ UNCHANGED committed
    /\ UNCHANGED start

\* The marker's answer reaches its sender: the current coordinator counts an applied (or
\* already applied) marker of its pending decision; a former holder told it is fenced
\* stops.
MarkerArrives(m, keep, lost) ==
    LET q == m.to
        t == m.c[1]
        v == MarkerVerdict(q, m)
        cs == coord[t]
    IN
    /\ m.type = "marker"
    /\ Deliver(m, keep, lost)
    /\ IF v = "APPLY" THEN ApplyMarker(q, m) ELSE UNCHANGED <<partVars, fate>>
    /\ ackd' = IF ~lost /\ v \in {"APPLY", "DUPLICATE"} /\ m.ce = lease[t]
                  /\ cs.state \in Ending /\ cs.pid = m.pid /\ cs.epoch = m.epoch
                 THEN [ackd EXCEPT ![t] = @ \cup {q}] ELSE ackd
    /\ live' = IF ~lost /\ v = "COORDINATOR_FENCED" /\ m.ce # lease[t]
                 THEN [live EXCEPT ![t] = @ \ {m.ce}] ELSE live
    /\ UNCHANGED <<coord, nextPid, lease, cli, decisions, asked, grants, moves, trims>>

\* A message that never arrives.
LoseMsg(m) ==
    /\ m \in net
    /\ faults.loss < MaxLoss
    /\ net' = net \ {m}
    /\ faults' = [faults EXCEPT !.loss = @ + 1]
    /\ UNCHANGED <<coordVars, cli, partVars, ghosts, moves, trims>>

\* DeleteRecords (or retention) moves the log start up to the high watermark; the
\* aborted index forgets what lies wholly below it.
DeleteRecords(p) ==
    /\ trims < MaxTrims
    /\ \E o \in (start[p] + 1)..HW(p) :
         /\ start' = [start EXCEPT ![p] = o]
         /\ aborted' = [aborted EXCEPT ![p] = {a \in @ : a.last >= o}]
    /\ trims' = trims + 1
    /\ UNCHANGED <<coordVars, cli, net, log, ps, committed, ghosts, moves, faults>>

\* The steps on messages, named (TLC names an action by the operator that defines it).
DeliverData == \E m \in net, keep, lost \in BOOLEAN : DataArrives(m, keep, lost)
DeliverEnd == \E m \in net, keep, lost \in BOOLEAN : EndTxnArrives(m, keep, lost)
DeliverMarker == \E m \in net, keep, lost \in BOOLEAN : MarkerArrives(m, keep, lost)
Lose == \E m \in net : LoseMsg(m)
SendMarker(t) == \E q \in Participants, tok \in live[t] : SendMarkerTo(t, q, tok)
Retire(t) == \E tok \in live[t] : RetireToken(t, tok)

Next ==
    \/ \E c \in Clients :
         \/ ClientInit(c) \/ ClientEnd(c, "COMMIT") \/ ClientEnd(c, "ABORT") \/ ClientRetryEnd(c)
         \/ \E q \in Participants : ClientWrite(c, q)
    \/ DeliverData \/ DeliverEnd \/ DeliverMarker \/ Lose
    \/ \E t \in TxnIds :
         \/ TimeoutAbort(t) \/ Expire(t) \/ Tick(t) \/ CompleteTxn(t) \/ Takeover(t)
         \/ Retire(t) \/ SendMarker(t)
    \/ \E p \in Partitions : DeleteRecords(p)

Spec == Init /\ [][Next]_vars

\* Fair coordinators and a network that delivers the current coordinator's markers and
\* EndTxn answers, within the loss budget; clients need no fairness (they may stop).
Fairness ==
    \A t \in TxnIds :
        /\ WF_vars(Tick(t)) /\ WF_vars(TimeoutAbort(t)) /\ WF_vars(CompleteTxn(t))
        /\ WF_vars(\E q \in Participants : SendMarkerTo(t, q, lease[t]))
        /\ WF_vars(\E m \in net, keep, lost \in BOOLEAN :
                      m.type = "marker" /\ m.c[1] = t /\ m.ce = lease[t]
                      /\ MarkerArrives(m, keep, lost))
LiveSpec == Spec /\ Fairness

Symmetry == Permutations(TxnIds) \cup Permutations(Instances) \cup Permutations(Partitions)

-----------------------------------------------------------------------------
(* What a read_committed consumer gets from partition p: it fetches from the log start *)
(* up to the LSO with the aborted transactions overlapping that range, and, as Kafka's  *)
(* client does, skips a producer's data from the first offset of each of its aborted    *)
(* transactions to that producer's ABORT marker, and every control record.             *)

RECURSIVE Scan(_, _, _, _, _)
Scan(p, o, hi, skipping, pending) ==
    IF o >= hi THEN {}
    ELSE LET reached == {a \in pending : a.first <= o}
             skip == skipping \cup {a.pid : a \in reached}
             r == log[p][o + 1]
             rest == Scan(p, o + 1, hi, IF r.kind = "ABORT" THEN skip \ {r.pid} ELSE skip,
                          pending \ reached)
         IN  IF r.kind = "data" /\ r.pid \notin skip THEN {r.txn} \cup rest ELSE rest

AbortedList(p) == {a \in aborted[p] : a.last >= start[p] /\ a.first < LSO(p)}
ReadCommitted(p) == Scan(p, start[p], LSO(p), {}, AbortedList(p))

CommittedTxns == {d.txn : d \in {e \in decisions : e.result = "COMMIT"}}

-----------------------------------------------------------------------------
(* Invariants *)

Txn == (Clients \X Nat) \cup {NoTxn}
Record == [kind : {"data"} \cup Results, pid : Pids, epoch : 0..MaxEpoch, txn : Txn]
Producer == [epoch : -1..MaxEpoch, mark : -1..MaxEpoch, ce : 0..MaxToken, first : Int,
             open : Txn]
States == {"None", "Empty", "Ongoing"} \cup Ending \cup Complete

TypeOK ==
    /\ \A t \in TxnIds :
         /\ coord[t].state \in States /\ coord[t].pid \in 0..MaxPid
         /\ coord[t].epoch \in -1..MaxEpoch /\ coord[t].parts \subseteq Participants
         /\ coord[t].age \in 0..(IF Timeout > ExpireAfter THEN Timeout ELSE ExpireAfter)
         /\ lease[t] \in 1..MaxToken /\ live[t] \subseteq 1..lease[t] /\ lease[t] \in live[t]
         /\ ackd[t] \subseteq Participants
    /\ nextPid \in 1..(MaxPid + 1)
    /\ \A c \in Clients : cli[c].st \in {"init", "ready", "txn", "ending"}
                          /\ cli[c].epoch \in -1..MaxEpoch
    /\ \A p \in Partitions : log[p] \in Seq(Record) /\ start[p] \in 0..HW(p)
    /\ \A q \in Participants : \A x \in Pids : ps[q][x] \in Producer
    /\ moves \in 0..MaxMoves /\ faults.loss \in 0..MaxLoss /\ faults.dup \in 0..MaxDup

\* A read_committed reader never returns a record of a transaction that was aborted or is
\* not decided (Jepsen's aborted read, G1a, and its "precommitted read").
NoAbortedRead == \A p \in Partitions : ReadCommitted(p) \subseteq CommittedTxns

\* One outcome per transaction: it is decided at most once, and every participant's
\* records and offsets of it end with that decision (no torn transaction).
Atomic ==
    /\ \A d1, d2 \in decisions : d1.txn = d2.txn => d1 = d2
    /\ \A f \in fate : \E d \in decisions : d.txn = f.txn /\ d.result = f.result

\* A transaction commits only if its producer asked to commit it (a late EndTxn of an
\* earlier transaction never commits a later one).
CommitOnlyWhenAsked == \A d \in decisions : d.result = "COMMIT" => d.txn \in asked

\* Every marker in a log is the durable decision of its producer id and epoch, and one
\* decision has one producer id and epoch.
MarkerMatchesDecision ==
    /\ \A d1, d2 \in decisions : d1.pid = d2.pid /\ d1.epoch = d2.epoch => d1 = d2
    /\ \A p \in Partitions : \A i \in DOMAIN log[p] :
         log[p][i].kind \in Results =>
            \E d \in decisions : d.pid = log[p][i].pid /\ d.epoch = log[p][i].epoch
                                 /\ d.result = log[p][i].kind

\* No hanging transaction: what a participant holds open for a producer is that
\* producer's transaction the coordinator has open or is deciding, with the participant
\* in it (so its marker will come); and every data record from the open transaction's
\* first offset on, of that producer, is that transaction's.
NoHangingTxn ==
    /\ \A q \in Participants : \A x \in Pids :
         ps[q][x].open # NoTxn =>
            \E t \in TxnIds : /\ coord[t].pid = x /\ coord[t].txn = ps[q][x].open
                              /\ coord[t].state \in {"Ongoing"} \cup Ending
                              /\ q \in coord[t].parts
    /\ \A p \in Partitions : \A x \in Pids : \A i \in DOMAIN log[p] :
         ps[p][x].first # -1 /\ i > ps[p][x].first /\ log[p][i].pid = x
            => log[p][i].kind = "data" /\ log[p][i].txn = ps[p][x].open

\* The group's committed offsets (what OffsetFetch returns) were written by a committed
\* transaction: pending offsets become visible only on commit.
OffsetsOnlyOnCommit == committed = NoTxn \/ committed \in CommittedTxns

\* log start <= LSO <= high watermark.
LsoBounds == \A p \in Partitions : start[p] <= LSO(p) /\ LSO(p) <= HW(p)

\* The LSO never goes back.
LsoNeverBack == [][\A p \in Partitions : LSO(p)' >= LSO(p)]_vars

\* A producer id and epoch is handed to one client instance only (a zombie and its
\* successor never share one).
OneInstancePerProducerEpoch ==
    \A g1, g2 \in grants : g1.pid = g2.pid /\ g1.epoch = g2.epoch => g1.c = g2.c

\* Epochs are never reused: producer ids are allocated once; a transactional id's epoch
\* for its producer id, the coordinator epoch, and what a participant last saw of a
\* producer (its epoch, its coordinator epoch) never go back.
EpochsNeverReused ==
    [][/\ nextPid' >= nextPid
       /\ \A t \in TxnIds :
            /\ lease'[t] >= lease[t]
            /\ coord[t].state # "None" /\ coord'[t].pid = coord[t].pid
                 => coord'[t].epoch >= coord[t].epoch
       /\ \A q \in Participants : \A x \in Pids :
            ps'[q][x].epoch >= ps[q][x].epoch /\ ps'[q][x].ce >= ps[q][x].ce]_vars

-----------------------------------------------------------------------------
(* Liveness, under Fairness *)

\* Every open or deciding transaction is eventually complete: decided and every marker
\* written.
TxnsComplete == \A t \in TxnIds :
    coord[t].state \in {"Ongoing"} \cup Ending ~> coord[t].state \in Complete

\* Once the producers stop (their moves are bounded), every partition's LSO reaches its
\* high watermark and stays there.
LsoReachesHW == <>[](\A p \in Partitions : LSO(p) = HW(p))
=============================================================================
