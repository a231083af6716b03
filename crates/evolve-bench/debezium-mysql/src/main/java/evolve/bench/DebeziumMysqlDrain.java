package evolve.bench;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;
import java.io.ObjectOutputStream;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The Debezium baseline of {@code cargo xtask bench mysql}: Debezium's MySQL
 * connector in the embedded engine, streaming a MariaDB server's binlog
 * from a given file and position (the one every consumer of the benchmark
 * starts at, taken before the load) into a consumer that counts the change
 * events of one table, serialized as Debezium's JSON change events, and
 * discards them. It stops at the marker row, the insert of key
 * {@code id = 0}.
 *
 * <p>The engine starts from that position through its offset store: before
 * the engine is built, the program writes a Kafka Connect file offset store
 * (the format of {@code FileOffsetBackingStore}: a serialized
 * {@code HashMap<byte[], byte[]>} of JSON key and value) holding
 * {@code {"file": ..., "pos": ...}} for the connector's partition, and runs
 * the connector with {@code snapshot.mode=recovery}: the tables' schemas
 * are read from the server (no rows), the schema history is kept in memory
 * ({@code MemorySchemaHistory}), and the binlog is streamed from the stored
 * offset.
 *
 * <p>The connector's JDBC sessions answer {@code SHOW BINARY LOG STATUS},
 * which MariaDB lacks, with {@code SHOW MASTER STATUS} ({@link
 * BinaryLogStatus}); the connector stops on MariaDB without it.
 *
 * <p>Arguments are {@code --name value} pairs: host, port, user, password,
 * database, table (database.table), file, pos, offsets (the offset file to
 * write), server-id, timeout-seconds.
 *
 * <p>Output, on stdout, lines starting with {@code evolve-debezium: } (the
 * engine's own logging goes to stderr): {@code started} once the engine is
 * built, then {@code marker events=N engine_ms=E jvm_ms=J first_ms=F}: N
 * change events of the table counted up to and including the marker, E
 * milliseconds since the engine was built (before its connector started),
 * J since the JVM started, F from the engine's build to its first event.
 * Exits 0 after the marker, 1 when the engine stops before it or the
 * timeout passes.
 */
public final class DebeziumMysqlDrain {
    private static final String PREFIX = "evolve-debezium: ";
    private static final String NAME = "evolve-bench-debezium-mysql";
    private static final String TOPIC_PREFIX = "evolve_bench";

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) {
                fail("expected --name value pairs, got " + args[i]);
            }
            opts.put(args[i].substring(2), args[i + 1]);
        }
        String table = need(opts, "table");
        String topic = TOPIC_PREFIX + "." + table;
        long timeoutSeconds = Long.parseLong(opts.getOrDefault("timeout-seconds", "1800"));
        Path offsets = Path.of(need(opts, "offsets"));
        writeOffset(offsets, need(opts, "file"), Long.parseLong(need(opts, "pos")));

        Properties props = new Properties();
        props.setProperty("name", NAME);
        props.setProperty("connector.class", "io.debezium.connector.mysql.MySqlConnector");
        props.setProperty("offset.storage", "org.apache.kafka.connect.storage.FileOffsetBackingStore");
        props.setProperty("offset.storage.file.filename", offsets.toString());
        props.setProperty("offset.flush.interval.ms", "10000");
        props.setProperty("schema.history.internal", "io.debezium.relational.history.MemorySchemaHistory");
        props.setProperty("database.hostname", need(opts, "host"));
        props.setProperty("database.port", need(opts, "port"));
        props.setProperty("database.user", need(opts, "user"));
        props.setProperty("database.password", opts.getOrDefault("password", ""));
        // MariaDB has no SHOW BINARY LOG STATUS: answered with SHOW MASTER
        // STATUS (see BinaryLogStatus).
        props.setProperty("driver.propertiesTransform", BinaryLogStatus.class.getName());
        props.setProperty("database.server.id", opts.getOrDefault("server-id", "5401"));
        props.setProperty("database.include.list", need(opts, "database"));
        props.setProperty("table.include.list", table);
        props.setProperty("topic.prefix", TOPIC_PREFIX);
        // The schemas from the server, no rows; then the binlog from the
        // stored offset. No global read lock (nothing writes meanwhile).
        props.setProperty("snapshot.mode", "recovery");
        props.setProperty("snapshot.locking.mode", "none");
        props.setProperty("include.schema.changes", "false");
        // Plain JSON documents (no schema envelope in every event).
        props.setProperty("converter.schemas.enable", "false");

        AtomicReference<String> failure = new AtomicReference<>();
        CountDownLatch done = new CountDownLatch(1);
        AtomicLong counted = new AtomicLong();
        long[] first = {-1};

        DebeziumEngine.ChangeConsumer<ChangeEvent<String, String>> consumer =
                new DebeziumEngine.ChangeConsumer<>() {
                    @Override
                    public void handleBatch(
                            List<ChangeEvent<String, String>> records,
                            DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer)
                            throws InterruptedException {
                        for (ChangeEvent<String, String> event : records) {
                            if (topic.equals(event.destination()) && event.value() != null) {
                                if (first[0] < 0) {
                                    first[0] = System.nanoTime();
                                }
                                long n = counted.incrementAndGet();
                                if (done.getCount() > 0 && isMarker(event)) {
                                    long now = System.nanoTime();
                                    System.out.println(PREFIX + "marker events=" + n
                                            + " engine_ms=" + ms(now - BUILT[0])
                                            + " jvm_ms=" + ManagementFactory.getRuntimeMXBean().getUptime()
                                            + " first_ms=" + ms(first[0] - BUILT[0]));
                                    System.out.flush();
                                    done.countDown();
                                }
                            }
                            committer.markProcessed(event);
                        }
                        committer.markBatchFinished();
                    }
                };

        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
                .using(props)
                .using((success, message, error) -> {
                    if (!success || done.getCount() > 0) {
                        failure.compareAndSet(null, "the engine stopped: " + message
                                + (error == null ? "" : " (" + error + ")"));
                    }
                    done.countDown();
                })
                .notifying(consumer)
                .build();
        BUILT[0] = System.nanoTime();
        System.out.println(PREFIX + "started");
        System.out.flush();

        ExecutorService executor = Executors.newSingleThreadExecutor();
        executor.execute(engine);
        if (!done.await(timeoutSeconds, TimeUnit.SECONDS)) {
            failure.compareAndSet(null, "no marker within " + timeoutSeconds + " s, "
                    + counted.get() + " events counted");
        }
        String why = failure.get();
        try {
            engine.close();
            executor.shutdown();
            executor.awaitTermination(60, TimeUnit.SECONDS);
        } catch (Exception e) {
            // Already stopped (a failure said so above) or slow to stop:
            // the figures are printed either way.
        }
        if (why != null) {
            fail(why);
        }
        System.exit(0);
    }

    private static final long[] BUILT = {System.nanoTime()};

    /**
     * Writes a file offset store holding binlog {@code file} at {@code pos}
     * for the connector's partition ({@code {"server": topic.prefix}}),
     * keyed as the engine's offset reader looks it up: the JSON of
     * {@code [name, partition]}.
     */
    private static void writeOffset(Path path, String file, long pos) throws Exception {
        String key = "[\"" + NAME + "\",{\"server\":\"" + TOPIC_PREFIX + "\"}]";
        String value = "{\"file\":\"" + file + "\",\"pos\":" + pos + "}";
        HashMap<byte[], byte[]> raw = new HashMap<>();
        raw.put(key.getBytes(StandardCharsets.UTF_8), value.getBytes(StandardCharsets.UTF_8));
        try (OutputStream out = Files.newOutputStream(path);
                ObjectOutputStream os = new ObjectOutputStream(out)) {
            os.writeObject(raw);
        }
    }

    /** The insert of the marker row: key {"id":0}, operation "c". */
    private static boolean isMarker(ChangeEvent<String, String> event) {
        String key = event.key();
        return key != null
                && key.replace(" ", "").equals("{\"id\":0}")
                && event.value().contains("\"op\":\"c\"");
    }

    private static long ms(long nanos) {
        return TimeUnit.NANOSECONDS.toMillis(nanos);
    }

    private static String need(Map<String, String> opts, String name) {
        String value = opts.get(name);
        if (value == null) {
            fail("missing --" + name);
        }
        return value;
    }

    private static void fail(String message) {
        System.out.println(PREFIX + "error " + message);
        System.out.flush();
        System.exit(1);
    }
}
