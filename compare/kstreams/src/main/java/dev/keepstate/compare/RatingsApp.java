package dev.keepstate.compare;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.SortedSet;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.TaskId;
import org.apache.kafka.streams.state.KeyValueStore;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The keepstate job written with Kafka Streams, as the reference for the
 * throughput comparison: read Avro ratings (Confluent framing) from the input
 * topic, re-key them by movie id (a repartition topic), aggregate count and
 * sum per movie in a RocksDB store (with its changelog), and write the average
 * (Long key, Double value) to the output topic.
 *
 * <p>Confluent's Avro serde is not on Maven Central, so the 5-byte header
 * (magic byte 0 and the 4-byte schema id) is stripped and the body decoded
 * with org.apache.avro against avro/rating.avsc, the schema keepstate's
 * producer registers. A record that does not decode is logged and skipped.
 *
 * <p>Flags (all optional except --bootstrap-servers):
 * <pre>
 * --bootstrap-servers host:port   --application-id ks-ratings
 * --input-topic ratings           --output-topic rating-averages
 * --processing-guarantee at_least_once|exactly_once_v2
 * --instance-id ID                static membership (group.instance.id)
 * --state-dir DIR                 RocksDB state directory
 * --commit-interval-ms N          default: Kafka Streams' own (30000 ALOS, 100 EOS)
 * --threads N                     num.stream.threads (default 1)
 * --session-timeout-ms N          consumer session.timeout.ms (default 10000)
 * --standby-replicas N            num.standby.replicas (default: Kafka Streams' own, 0)
 * --probing-rebalance-interval-ms N  probing.rebalance.interval.ms (default: Kafka Streams' own)
 * --acceptable-recovery-lag N     acceptable.recovery.lag (default: Kafka Streams' own)
 * --max-warmup-replicas N         max.warmup.replicas (default: Kafka Streams' own)
 * --status-file PATH              every 100 ms, when it changed, write the client's state and
 *                                 the tasks its threads hold as one JSON line to PATH
 *                                 (atomically, through PATH.tmp), e.g.
 *                                 {"state":"RUNNING","active":["0_1","1_3"],"standby":["1_4"]}
 * </pre>
 */
public final class RatingsApp {
    private static final Logger LOG = LoggerFactory.getLogger(RatingsApp.class);

    private RatingsApp() {
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> flags = parseFlags(args);
        String bootstrap = flags.get("bootstrap-servers");
        if (bootstrap == null) {
            System.err.println("kstreams-ratings: --bootstrap-servers is required");
            System.exit(2);
        }
        String guarantee = flags.getOrDefault("processing-guarantee", StreamsConfig.AT_LEAST_ONCE);
        if (!guarantee.equals(StreamsConfig.AT_LEAST_ONCE) && !guarantee.equals(StreamsConfig.EXACTLY_ONCE_V2)) {
            System.err.println("kstreams-ratings: --processing-guarantee must be at_least_once or exactly_once_v2, got " + guarantee);
            System.exit(2);
        }
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, flags.getOrDefault("application-id", "ks-ratings"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, flags.getOrDefault("threads", "1"));
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), flags.getOrDefault("session-timeout-ms", "10000"));
        if (flags.containsKey("state-dir")) {
            p.put(StreamsConfig.STATE_DIR_CONFIG, flags.get("state-dir"));
        }
        if (flags.containsKey("commit-interval-ms")) {
            p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, flags.get("commit-interval-ms"));
        }
        if (flags.containsKey("instance-id")) {
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG), flags.get("instance-id"));
        }
        if (flags.containsKey("standby-replicas")) {
            p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, flags.get("standby-replicas"));
        }
        if (flags.containsKey("probing-rebalance-interval-ms")) {
            p.put(StreamsConfig.PROBING_REBALANCE_INTERVAL_MS_CONFIG, flags.get("probing-rebalance-interval-ms"));
        }
        if (flags.containsKey("acceptable-recovery-lag")) {
            p.put(StreamsConfig.ACCEPTABLE_RECOVERY_LAG_CONFIG, flags.get("acceptable-recovery-lag"));
        }
        if (flags.containsKey("max-warmup-replicas")) {
            p.put(StreamsConfig.MAX_WARMUP_REPLICAS_CONFIG, flags.get("max-warmup-replicas"));
        }

        StreamsBuilder b = new StreamsBuilder();
        RatingDecoder decoder = new RatingDecoder(loadSchema());
        b.stream(flags.getOrDefault("input-topic", "ratings"), Consumed.with(Serdes.Bytes(), Serdes.ByteArray()))
            .flatMap((key, value) -> {
                Rating r = decoder.decode(value);
                return r == null ? List.<KeyValue<Long, Double>>of() : List.of(KeyValue.pair(r.movieId, r.rating));
            })
            .groupByKey(Grouped.with("ratings-by-movie", Serdes.Long(), Serdes.Double()))
            .aggregate(CountSum::new, (movie, rating, agg) -> agg.add(rating),
                Materialized.<Long, CountSum, KeyValueStore<Bytes, byte[]>>as("movie-stats")
                    .withKeySerde(Serdes.Long()).withValueSerde(CountSum.SERDE))
            .toStream()
            .mapValues(CountSum::average)
            .to(flags.getOrDefault("output-topic", "rating-averages"), Produced.with(Serdes.Long(), Serdes.Double()));

        KafkaStreams streams = new KafkaStreams(b.build(), p);
        StatusFile status = flags.containsKey("status-file") ? new StatusFile(streams, Paths.get(flags.get("status-file"))) : null;
        CountDownLatch done = new CountDownLatch(1);
        streams.setUncaughtExceptionHandler(e -> {
            LOG.error("stream thread failed", e);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.setStateListener((now, before) -> {
            LOG.info("state {} -> {}", before, now);
            if (now == KafkaStreams.State.NOT_RUNNING || now == KafkaStreams.State.ERROR) {
                done.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            if (status != null) {
                status.stop();
            }
            streams.close();
            done.countDown();
        }));
        streams.start();
        if (status != null) {
            status.start();
        }
        done.await();
        if (status != null) {
            status.stop();
        }
        streams.close();
    }

    /** Reads --name value pairs. */
    static Map<String, String> parseFlags(String[] args) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument " + a);
            }
            String name = a.substring(2);
            int eq = name.indexOf('=');
            if (eq >= 0) {
                m.put(name.substring(0, eq), name.substring(eq + 1));
            } else if (i + 1 < args.length) {
                m.put(name, args[++i]);
            } else {
                throw new IllegalArgumentException("flag " + a + " needs a value");
            }
        }
        return m;
    }

    /**
     * Writes the client's state and the tasks its stream threads hold to a
     * file, every 100 ms when they changed: one JSON line such as
     * {"state":"RUNNING","active":["0_1","1_3"],"standby":["1_4"]}, the task
     * ids sorted and de-duplicated. The file is replaced atomically (written
     * to PATH.tmp, then renamed), so a reader never sees a partial line.
     */
    static final class StatusFile {
        private final KafkaStreams streams;
        private final Path path;
        private final Path tmp;
        private final ScheduledExecutorService exec;
        private String last;
        private String lastError;

        StatusFile(KafkaStreams streams, Path path) {
            this.streams = streams;
            this.path = path;
            this.tmp = Paths.get(path + ".tmp");
            this.exec = Executors.newSingleThreadScheduledExecutor(r -> {
                Thread t = new Thread(r, "status-file");
                t.setDaemon(true);
                return t;
            });
        }

        void start() {
            exec.scheduleWithFixedDelay(this::poll, 0, 100, TimeUnit.MILLISECONDS);
        }

        /** Stops the polling; a write under way finishes first. */
        void stop() {
            exec.shutdown();
            try {
                if (!exec.awaitTermination(2, TimeUnit.SECONDS)) {
                    exec.shutdownNow();
                }
            } catch (InterruptedException e) {
                exec.shutdownNow();
                Thread.currentThread().interrupt();
            }
        }

        private void poll() {
            try {
                String json = snapshot();
                lastError = null;
                if (json.equals(last)) {
                    return;
                }
                Files.write(tmp, (json + "\n").getBytes(StandardCharsets.UTF_8));
                Files.move(tmp, path, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
                last = json;
                LOG.info("tasks {}", json);
            } catch (Exception e) {
                // metadataForLocalThreads throws while the client is not
                // running or rebalancing; log each distinct error once.
                String msg = e.toString();
                if (!msg.equals(lastError)) {
                    LOG.warn("status file: {}", msg);
                    lastError = msg;
                }
            }
        }

        private String snapshot() {
            String state = streams.state().name();
            SortedSet<TaskId> active = new TreeSet<>();
            SortedSet<TaskId> standby = new TreeSet<>();
            for (ThreadMetadata t : streams.metadataForLocalThreads()) {
                for (TaskMetadata tm : t.activeTasks()) {
                    active.add(tm.taskId());
                }
                for (TaskMetadata tm : t.standbyTasks()) {
                    standby.add(tm.taskId());
                }
            }
            StringBuilder sb = new StringBuilder();
            sb.append("{\"state\":\"").append(state).append("\",\"active\":");
            appendIds(sb, active);
            sb.append(",\"standby\":");
            appendIds(sb, standby);
            return sb.append('}').toString();
        }

        private static void appendIds(StringBuilder sb, SortedSet<TaskId> ids) {
            sb.append('[');
            boolean first = true;
            for (TaskId id : ids) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                sb.append('"').append(id).append('"');
            }
            sb.append(']');
        }
    }

    /** Loads rating.avsc (the repository's avro/rating.avsc) from the classpath. */
    static Schema loadSchema() throws IOException {
        try (InputStream in = RatingsApp.class.getResourceAsStream("/rating.avsc")) {
            if (in == null) {
                throw new IOException("rating.avsc not on the classpath");
            }
            return new Schema.Parser().parse(new String(in.readAllBytes(), StandardCharsets.UTF_8));
        }
    }

    /** One decoded rating. */
    record Rating(long movieId, double rating) {
    }

    /** Decodes Confluent-framed Avro ratings; one per stream thread is not needed, it is thread-safe. */
    static final class RatingDecoder {
        private final GenericDatumReader<GenericRecord> reader;
        private final ThreadLocal<BinaryDecoder> decoders = new ThreadLocal<>();

        RatingDecoder(Schema schema) {
            this.reader = new GenericDatumReader<>(schema);
        }

        /** Returns the rating, or null (logged) when value is not a framed Rating. */
        Rating decode(byte[] value) {
            if (value == null || value.length < 5 || value[0] != 0) {
                LOG.warn("skipping a record without the Confluent framing ({} bytes)", value == null ? -1 : value.length);
                return null;
            }
            try {
                BinaryDecoder d = DecoderFactory.get().binaryDecoder(value, 5, value.length - 5, decoders.get());
                decoders.set(d);
                GenericRecord r = reader.read(null, d);
                return new Rating((Long) r.get("movie_id"), (Double) r.get("rating"));
            } catch (IOException | RuntimeException e) {
                LOG.warn("skipping a record that is not an Avro Rating: {}", e.toString());
                return null;
            }
        }
    }

    /** The aggregate: how many ratings a movie got and their sum. */
    static final class CountSum {
        static final Serde<CountSum> SERDE = Serdes.serdeFrom(
            (Serializer<CountSum>) (topic, v) -> ByteBuffer.allocate(16).putLong(v.count).putDouble(v.sum).array(),
            (Deserializer<CountSum>) (topic, b) -> {
                if (b == null) {
                    return null;
                }
                ByteBuffer bb = ByteBuffer.wrap(b);
                CountSum cs = new CountSum();
                cs.count = bb.getLong();
                cs.sum = bb.getDouble();
                return cs;
            });

        long count;
        double sum;

        CountSum add(double rating) {
            count++;
            sum += rating;
            return this;
        }

        double average() {
            return count == 0 ? 0 : sum / count;
        }
    }
}
