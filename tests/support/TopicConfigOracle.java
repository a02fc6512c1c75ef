import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.storage.internals.log.LogConfig;

/**
 * Apache Kafka's own reading of topic settings (its LogConfig's ConfigDef), the oracle of
 * tests/integration/test_topic_config_defs.py. Run from source against Kafka's jars:
 *
 *   java -cp KAFKA_JARS TopicConfigOracle.java names
 *       one line per topic setting: name TAB type TAB default (a list joined with commas)
 *   java -cp KAFKA_JARS TopicConfigOracle.java check < lines
 *       each input line is name TAB hex(UTF-8 value); prints "ok" or "refused TAB message"
 */
public class TopicConfigOracle {
    public static void main(String[] args) throws Exception {
        ConfigDef definitions = LogConfig.configDefCopy();
        if (args.length == 1 && args[0].equals("names")) {
            for (String name : new TreeSet<>(LogConfig.configNames())) {
                ConfigDef.ConfigKey key = definitions.configKeys().get(name);
                Object value = key.hasDefault() ? key.defaultValue : null;
                String text = value instanceof List<?> list
                        ? String.join(",", list.stream().map(String::valueOf).toList())
                        : String.valueOf(value);
                System.out.println(name + "\t" + key.type.name().toLowerCase() + "\t" + text);
            }
            return;
        }
        if (args.length == 1 && args[0].equals("check")) {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null) {
                String[] parts = line.split("\t", -1);
                String value = new String(HexFormat.of().parseHex(parts[1]), StandardCharsets.UTF_8);
                try {
                    definitions.parse(Map.of(parts[0], value));
                    System.out.println("ok");
                } catch (ConfigException refused) {
                    System.out.println("refused\t" + refused.getMessage().replace('\n', ' '));
                }
            }
            return;
        }
        System.err.println("usage: TopicConfigOracle.java names | check");
        System.exit(2);
    }
}
