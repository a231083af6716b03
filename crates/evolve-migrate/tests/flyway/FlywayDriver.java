// Drives the real Flyway through its Java API for evolve's tests and
// benchmark.
//
//   java -cp <jars>/*:<classes> FlywayDriver key=value ... -- command ...
//
// Each key=value is a Flyway configuration property (flyway.url,
// flyway.locations, flyway.placeholders.x, ...), passed as they are to
// Flyway.configure().configuration(map); an argument `@FILE` reads more
// properties from a flyway.conf-style file. The commands (migrate, info,
// validate, repair, baseline) run in order, whatever the outcome of the one
// before, and each prints one JSON object on a line of its own to standard
// output: {"command":...,"ok":...,"ms":...,...}, after one for the
// configuration itself ("configure"; when Flyway refuses the configuration
// it is the only one). Flyway's own log goes to standard error.
//
// driver.environment=NAME is no Flyway property: the connection
// (flyway.url, flyway.user, flyway.password) becomes the environment NAME,
// which is the current one, as a flyway.toml with `[flyway] environment`
// and `[environments.NAME]` makes it. With it, driver.env.flyway.KEY=VALUE
// sets KEY of that environment's `flyway` table (a flyway.toml's
// `[environments.NAME.flyway]`: settings overriding `[flyway]`'s), and
// driver.env.flyway.placeholders.NAME=VALUE a placeholder there.

import java.io.FileInputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.lang.reflect.Method;
import java.util.Arrays;
import java.util.HashMap;

import org.flywaydb.core.Flyway;
import org.flywaydb.core.api.MigrationInfo;
import org.flywaydb.core.api.output.MigrateResult;
import org.flywaydb.core.api.output.RepairResult;
import org.flywaydb.core.api.output.ValidateResult;
import org.flywaydb.core.api.configuration.FluentConfiguration;
import org.flywaydb.core.internal.configuration.models.EnvironmentModel;
import org.flywaydb.database.postgresql.PostgreSQLConfigurationExtension;

public class FlywayDriver {
    public static void main(String[] args) throws Exception {
        PrintStream out = System.out;
        System.setOut(System.err);
        Map<String, String> config = new LinkedHashMap<>();
        List<String> commands = new ArrayList<>();
        boolean inCommands = false;
        for (String arg : args) {
            if (inCommands) {
                commands.add(arg);
            } else if (arg.equals("--")) {
                inCommands = true;
            } else if (arg.startsWith("@")) {
                Properties p = new Properties();
                try (InputStreamReader r = new InputStreamReader(
                        new FileInputStream(arg.substring(1)), StandardCharsets.UTF_8)) {
                    p.load(r);
                }
                for (String k : p.stringPropertyNames()) {
                    config.put(k, p.getProperty(k));
                }
            } else {
                int eq = arg.indexOf('=');
                config.put(arg.substring(0, eq), arg.substring(eq + 1));
            }
        }
        long started = System.nanoTime();
        // Set through its extension: the property needs jackson-databind.
        String lock = config.remove("flyway.postgresql.transactional.lock");
        String environment = config.remove("driver.environment");
        EnvironmentModel env = null;
        if (environment != null) {
            env = new EnvironmentModel();
            env.setUrl(config.remove("flyway.url"));
            env.setUser(config.remove("flyway.user"));
            env.setPassword(config.remove("flyway.password"));
            Map<String, String> placeholders = null;
            for (String key : new ArrayList<>(config.keySet())) {
                if (!key.startsWith("driver.env.flyway.")) continue;
                String name = key.substring("driver.env.flyway.".length());
                String value = config.remove(key);
                if (name.startsWith("placeholders.")) {
                    if (placeholders == null) placeholders = new HashMap<>();
                    placeholders.put(name.substring("placeholders.".length()), value);
                } else {
                    setOverride(env.getFlyway(), name, value);
                }
            }
            if (placeholders != null) env.getFlyway().setPlaceholders(placeholders);
        }
        Flyway flyway;
        try {
            FluentConfiguration fluent = Flyway.configure().configuration(config);
            if (env != null) {
                Map<String, EnvironmentModel> envs = new LinkedHashMap<>();
                envs.put(environment, env);
                fluent = fluent.allEnvironments(envs).environment(environment);
            }
            if (lock != null) {
                fluent.getConfigurationExtension(PostgreSQLConfigurationExtension.class)
                        .setTransactionalLock(Boolean.parseBoolean(lock));
            }
            flyway = fluent.load();
        } catch (Exception e) {
            // Flyway refused the configuration: no command runs.
            out.println("{\"command\":\"configure\",\"ok\":false,\"ms\":" + ms(started)
                    + ",\"error\":" + str(String.valueOf(e.getMessage())) + "}");
            out.flush();
            return;
        }
        out.println("{\"command\":\"configure\",\"ok\":true,\"ms\":" + ms(started) + "}");
        for (String command : commands) {
            long t = System.nanoTime();
            StringBuilder b = new StringBuilder();
            try {
                switch (command) {
                    case "migrate": {
                        MigrateResult r = flyway.migrate();
                        b.append(",\"executed\":").append(r.migrationsExecuted);
                        break;
                    }
                    case "info":
                        b.append(",\"rows\":[");
                        boolean first = true;
                        for (MigrationInfo i : flyway.info().all()) {
                            if (!first) b.append(',');
                            first = false;
                            b.append("{\"version\":").append(str(i.getVersion() == null ? null : i.getVersion().getVersion()));
                            b.append(",\"description\":").append(str(i.getDescription()));
                            b.append(",\"type\":").append(str(i.getType() == null ? null : i.getType().name()));
                            b.append(",\"script\":").append(str(i.getScript()));
                            b.append(",\"checksum\":").append(i.getChecksum());
                            b.append(",\"state\":").append(str(i.getState().name()));
                            b.append(",\"installed_rank\":").append(i.getInstalledRank());
                            b.append(",\"installed_by\":").append(str(i.getInstalledBy()));
                            b.append(",\"execution_time\":").append(i.getExecutionTime());
                            b.append('}');
                        }
                        b.append(']');
                        break;
                    case "validate": {
                        ValidateResult r = flyway.validateWithResult();
                        if (!r.validationSuccessful) {
                            throw new RuntimeException(r.getAllErrorMessages());
                        }
                        break;
                    }
                    case "repair": {
                        RepairResult r = flyway.repair();
                        b.append(",\"removed\":").append(r.migrationsRemoved.size());
                        b.append(",\"deleted\":").append(r.migrationsDeleted.size());
                        b.append(",\"aligned\":").append(r.migrationsAligned.size());
                        break;
                    }
                    case "baseline":
                        flyway.baseline();
                        break;
                    default:
                        throw new IllegalArgumentException("unknown command " + command);
                }
                out.println("{\"command\":" + str(command) + ",\"ok\":true,\"ms\":" + ms(t) + b + "}");
            } catch (Exception e) {
                out.println("{\"command\":" + str(command) + ",\"ok\":false,\"ms\":" + ms(t)
                        + ",\"error\":" + str(String.valueOf(e.getMessage())) + "}");
            }
        }
        out.flush();
    }

    /** Sets `name` of an environment's `flyway` table through its setter. */
    static void setOverride(Object model, String name, String value) throws Exception {
        String setter = "set" + Character.toUpperCase(name.charAt(0)) + name.substring(1);
        for (Method m : model.getClass().getMethods()) {
            if (!m.getName().equals(setter) || m.getParameterCount() != 1) continue;
            Class<?> t = m.getParameterTypes()[0];
            if (t == String.class) m.invoke(model, value);
            else if (t == Boolean.class) m.invoke(model, Boolean.valueOf(value));
            else if (t == Integer.class) m.invoke(model, Integer.valueOf(value));
            else if (t == List.class) m.invoke(model, new ArrayList<>(Arrays.asList(value.split(","))));
            else continue;
            return;
        }
        throw new IllegalArgumentException("no environment flyway setting " + name);
    }

    static long ms(long since) {
        return (System.nanoTime() - since) / 1_000_000;
    }

    static String str(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                    else b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
