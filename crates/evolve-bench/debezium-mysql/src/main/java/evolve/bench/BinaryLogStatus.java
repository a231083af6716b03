package evolve.bench;

import com.mysql.cj.MysqlConnection;
import com.mysql.cj.Query;
import com.mysql.cj.conf.ConnectionPropertiesTransform;
import com.mysql.cj.interceptors.QueryInterceptor;
import com.mysql.cj.log.Log;
import com.mysql.cj.protocol.Resultset;
import com.mysql.cj.protocol.ServerSession;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.Properties;
import java.util.function.Supplier;

/**
 * A Connector/J query interceptor that answers MySQL 8.4's
 * {@code SHOW BINARY LOG STATUS} with {@code SHOW MASTER STATUS}, which
 * MariaDB has (the same first four columns: File, Position,
 * Binlog_Do_DB, Binlog_Ignore_DB).
 *
 * <p>Debezium's MySQL connector asks for {@code SHOW BINARY LOG STATUS}
 * first and, when that fails, reads {@code SELECT VERSION()} as a MySQL
 * version: MariaDB 10.11 reads as later than MySQL 8.4, which must have the
 * statement, and the connector stops. The connector drops
 * {@code queryInterceptors} from the properties it passes to the driver,
 * so the benchmark passes this class as {@code propertiesTransform}
 * ({@code driver.propertiesTransform}), and as that it adds itself as the
 * session's query interceptor. Nothing else of the connector's traffic is
 * touched; the binlog stream does not go through JDBC.
 */
public final class BinaryLogStatus implements QueryInterceptor, ConnectionPropertiesTransform {
    private Connection connection;

    @Override
    public Properties transformProperties(Properties props) {
        props.setProperty("queryInterceptors", BinaryLogStatus.class.getName());
        return props;
    }

    @Override
    public QueryInterceptor init(MysqlConnection conn, Properties props, Log log) {
        this.connection = (Connection) conn;
        return this;
    }

    @Override
    @SuppressWarnings("unchecked")
    public <T extends Resultset> T preProcess(Supplier<String> sql, Query interceptedQuery) {
        String text = sql == null ? null : sql.get();
        if (text == null || !text.trim().equalsIgnoreCase("SHOW BINARY LOG STATUS")) {
            return null;
        }
        try {
            return (T) connection.createStatement().executeQuery("SHOW MASTER STATUS");
        } catch (SQLException e) {
            throw new RuntimeException(e);
        }
    }

    @Override
    public boolean executeTopLevelOnly() {
        return true;
    }

    @Override
    public void destroy() {}

    @Override
    public <T extends Resultset> T postProcess(
            Supplier<String> sql, Query interceptedQuery, T originalResultSet, ServerSession serverSession) {
        return null;
    }
}
