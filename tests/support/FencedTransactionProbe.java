// A transactional producer whose open transaction the coordinator ends under it, for the
// tests: Kafka 4.3.1's KafkaProducer (transactions v2 against a 4.3.1 broker), run as a
// single-file source program (`java FencedTransactionProbe.java ...`) against Korvet or Kafka,
// so that both brokers can be asked what the real client makes of it.
//
//   java FencedTransactionProbe.java BOOTSTRAP TOPIC TRANSACTIONAL_ID MODE
//
// MODE:
//   timeout  transaction.timeout.ms=2000: begin, send one record, flush, then wait (1 s at a
//            time, 30 s at most) until describeTransactions shows the coordinator has ended
//            the transaction, and commit it late
//   zombie   producer A begins, sends one record and flushes; producer B with the same
//            transactional id calls initTransactions, which ends A's transaction and fences
//            A; then A commits late; then B begins, sends one record and commits
//
// It prints, on stdout and nothing else:
//   COMMIT <simple class name of the exception A's commitTransaction threw, or OK>
//   ABORT <the same for abortTransaction>       (only when the commit failed)
//   B <OK or the class of the exception>               (zombie mode)
//   EPOCH <producer epoch describeTransactions shows at the end>
// Every exception's message goes to stderr, with the rest of the log (and, in zombie mode,
// the epoch describeTransactions shows right after B's initTransactions).
import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class FencedTransactionProbe {
    private static final int WAIT_SECONDS = 30;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], transactionalId = args[2], mode = args[3];
        Properties adminProps = new Properties();
        adminProps.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(adminProps)) {
            if (mode.equals("timeout")) {
                timeout(admin, bootstrap, topic, transactionalId);
            } else if (mode.equals("zombie")) {
                zombie(admin, bootstrap, topic, transactionalId);
            } else {
                throw new IllegalArgumentException("unknown mode " + mode);
            }
        }
        System.out.flush();
    }

    private static void timeout(Admin admin, String bootstrap, String topic, String transactionalId)
            throws Exception {
        KafkaProducer<String, String> producer = producer(bootstrap, transactionalId, "2000");
        try {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, "fenced", "fenced")).get();
            producer.flush();
            String state = describe(admin, transactionalId).state().toString();
            // The coordinator's abort is over once the state has left Ongoing and PrepareAbort:
            // a commit sent while it is under way would only be told to retry.
            for (int second = 0; second < WAIT_SECONDS && isOpen(state); second++) {
                Thread.sleep(1000);
                state = describe(admin, transactionalId).state().toString();
                System.err.println("waited " + (second + 1) + " s: " + state);
            }
            if (isOpen(state)) {
                System.err.println("the transaction is still " + state + " after " + WAIT_SECONDS + " s");
            }
            endLate(producer);
        } finally {
            producer.close(Duration.ofSeconds(5));
        }
        System.out.println("EPOCH " + describe(admin, transactionalId).producerEpoch());
    }

    private static void zombie(Admin admin, String bootstrap, String topic, String transactionalId)
            throws Exception {
        KafkaProducer<String, String> zombie = producer(bootstrap, transactionalId, null);
        KafkaProducer<String, String> successor = producer(bootstrap, transactionalId, null);
        try {
            zombie.initTransactions();
            zombie.beginTransaction();
            zombie.send(new ProducerRecord<>(topic, "fenced", "fenced")).get();
            zombie.flush();
            successor.initTransactions();
            logEpoch(admin, transactionalId, "after B's initTransactions");
            endLate(zombie);
            System.out.println("B " + outcome("B's transaction", () -> {
                successor.beginTransaction();
                successor.send(new ProducerRecord<>(topic, "after", "after")).get();
                successor.commitTransaction();
            }));
        } finally {
            zombie.close(Duration.ofSeconds(5));
            successor.close(Duration.ofSeconds(5));
        }
        System.out.println("EPOCH " + describe(admin, transactionalId).producerEpoch());
    }

    /** The late commit, and the abort an application tries when the commit failed. */
    private static void endLate(KafkaProducer<String, String> producer) {
        String commit = outcome("commitTransaction", producer::commitTransaction);
        System.out.println("COMMIT " + commit);
        if (!commit.equals("OK")) {
            System.out.println("ABORT " + outcome("abortTransaction", producer::abortTransaction));
        }
        System.out.flush();
    }

    private interface Call {
        void run() throws Exception;
    }

    /** OK, or the simple class name of what the call threw (its message to stderr). */
    private static String outcome(String what, Call call) {
        try {
            call.run();
            return "OK";
        } catch (Exception e) {
            return name(what, e);
        }
    }

    private static String name(String call, Exception e) {
        System.err.println(call + " threw " + e.getClass().getName() + ": " + e.getMessage());
        for (Throwable cause = e.getCause(); cause != null; cause = cause.getCause()) {
            System.err.println("  caused by " + cause.getClass().getName() + ": " + cause.getMessage());
        }
        return e.getClass().getSimpleName();
    }

    private static void logEpoch(Admin admin, String transactionalId, String when) throws Exception {
        TransactionDescription description = describe(admin, transactionalId);
        System.err.println(when + ": " + description.state() + ", producer " + description.producerId()
                + " epoch " + description.producerEpoch());
    }

    private static boolean isOpen(String state) {
        return state.equals("Ongoing") || state.equals("PrepareAbort") || state.equals("PrepareEpochFence");
    }

    private static TransactionDescription describe(Admin admin, String transactionalId) throws Exception {
        return admin.describeTransactions(List.of(transactionalId)).description(transactionalId).get();
    }

    private static KafkaProducer<String, String> producer(String bootstrap, String transactionalId,
                                                          String timeoutMs) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("transactional.id", transactionalId);
        props.put("max.block.ms", "30000");
        if (timeoutMs != null) {
            props.put("transaction.timeout.ms", timeoutMs);
        }
        return new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
    }
}
