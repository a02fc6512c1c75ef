// A share consumer (KIP-932) for the tests: Kafka 4.3.1's KafkaShareConsumer, run as a
// single-file source program (`java ShareConsumerProbe.java ...`) against Korvet or Kafka.
//
//   java ShareConsumerProbe.java BOOTSTRAP GROUP TOPIC MODE IDLE_MS [CLIENT_ID [RESET]]
//
// With RESET (`earliest`, `latest` or `by_duration:...`), the group's
// share.auto.offset.reset is set first through the Admin client (IncrementalAlterConfigs
// on the group), as `kafka-configs --entity-type groups` does.
// It prints one line per record it is given, `R <partition> <offset> <delivery count> <key>`,
// and what it did with it, and stops once no record came for IDLE_MS (not in `hold` mode).
// MODE:
//   accept          implicit acknowledgement: every record given is accepted by the next poll
//   release:K       explicit: a record given fewer than K times is released, then accepted
//   release-always  explicit: every record is released (it comes back until the delivery limit)
//   reject:KEY      explicit: the record with key KEY is rejected, the others accepted
//   hold            explicit: prints what the first non-empty poll gave, then `HOLDING`, and
//                   waits without acknowledging (the test kills it with its records acquired)
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.common.config.ConfigResource;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareConsumerProbe {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1], topic = args[2], mode = args[3];
        long idleMs = Long.parseLong(args[4]);
        if (args.length > 6) {
            Properties adminProps = new Properties();
            adminProps.put("bootstrap.servers", bootstrap);
            try (Admin admin = Admin.create(adminProps)) {
                ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
                AlterConfigOp op = new AlterConfigOp(
                        new ConfigEntry("share.auto.offset.reset", args[6]), AlterConfigOp.OpType.SET);
                admin.incrementalAlterConfigs(Map.of(resource, List.of(op))).all().get();
            }
        }
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("client.id", args.length > 5 ? args[5] : "share-probe");
        props.put("share.acknowledgement.mode", mode.equals("accept") ? "implicit" : "explicit");
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(
                props, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            long lastRecord = System.currentTimeMillis();
            while (true) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> record : records) {
                    int count = record.deliveryCount().map(Short::intValue).orElse(-1);
                    String action = act(consumer, record, mode, count);
                    System.out.println("R " + record.partition() + " " + record.offset() + " "
                            + count + " " + record.key() + " " + action);
                }
                if (!records.isEmpty()) {
                    lastRecord = System.currentTimeMillis();
                    if (mode.equals("hold")) {
                        System.out.println("HOLDING");
                        System.out.flush();
                        Thread.sleep(Long.MAX_VALUE);
                    }
                    if (!mode.equals("accept")) {
                        consumer.commitSync(Duration.ofSeconds(30));
                    }
                }
                System.out.flush();
                if (System.currentTimeMillis() - lastRecord > idleMs) {
                    break;
                }
            }
        }
        System.out.println("DONE");
    }

    private static String act(KafkaShareConsumer<String, String> consumer,
                              ConsumerRecord<String, String> record, String mode, int count) {
        AcknowledgeType type;
        if (mode.equals("accept") || mode.equals("hold")) {
            return mode.equals("accept") ? "accept" : "held";
        } else if (mode.equals("release-always")) {
            type = AcknowledgeType.RELEASE;
        } else if (mode.startsWith("release:")) {
            int until = Integer.parseInt(mode.substring("release:".length()));
            type = count < until ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
        } else if (mode.startsWith("reject:")) {
            type = mode.substring("reject:".length()).equals(record.key())
                    ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
        } else {
            throw new IllegalArgumentException("unknown mode " + mode);
        }
        consumer.acknowledge(record, type);
        return type.toString().toLowerCase();
    }
}
