//! `evolve_core::document` against a real PostgreSQL: for a table with a
//! column of every kind of type, every row's document must be exactly the
//! server's `coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb)`, both as
//! jsonb (`=`) and byte for byte (the server's text with its insignificant
//! spaces removed).
//!
//! The column values are read with the simple query protocol, which returns
//! each type's output function result, exactly what pgoutput sends (a
//! `::text` cast is not the same: `char(n)::text` drops the padding). The
//! `TypeKind`s come from the server's catalog through
//! `evolve_core::document::TypeCatalog`, as the pipeline's do: see
//! [`catalog`].

use evolve_core::document::{Column, DocumentError, RowEncoder, TypeKind, encode_key};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// Reading the server's catalog into
/// [`TypeCatalog`](evolve_core::document::TypeCatalog), the one mapping from
/// type OID to [`TypeKind`] that the pipeline uses too.
pub mod catalog {
    use evolve_core::document::{ATTRIBUTES_QUERY, Column, PgType, TYPES_QUERY, TypeCatalog};
    use tokio_postgres::Client;

    /// Reads every type and every composite type's attributes.
    pub async fn load(client: &Client) -> Result<TypeCatalog, tokio_postgres::Error> {
        let mut catalog = TypeCatalog::new();
        for row in client.query(TYPES_QUERY, &[]).await? {
            let typtype: i8 = row.get(1);
            let typdelim: i8 = row.get(3);
            catalog.add_type(PgType {
                oid: row.get(0),
                typtype: typtype as u8,
                typelem: row.get(2),
                typdelim: typdelim as u8,
                typbasetype: row.get(4),
                typrelid: row.get(5),
                array_subscript: row.get(6),
            });
        }
        for row in client.query(ATTRIBUTES_QUERY, &[]).await? {
            catalog.add_attribute(row.get(0), row.get(1), row.get(2));
        }
        Ok(catalog)
    }

    /// The columns of table `table` (a `regclass` literal), in attnum order,
    /// with their kinds.
    pub async fn table_columns(
        client: &Client,
        table: &str,
    ) -> Result<Vec<Column>, tokio_postgres::Error> {
        let catalog = load(client).await?;
        let rows = client
            .query(
                "SELECT attname::text, atttypid FROM pg_attribute \
                 WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped \
                 ORDER BY attnum",
                &[&table],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|row| {
                let name: String = row.get(0);
                let kind = catalog
                    .kind(row.get(1))
                    .unwrap_or_else(|| panic!("no type for column {name}"));
                Column { name, kind }
            })
            .collect())
    }
}

/// Removes the insignificant spaces of jsonb's text output (one after each
/// `:` and `,` outside strings), refusing any other white space outside
/// strings.
fn compact_jsonb_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut previous = '\0';
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == ' ' && (previous == ':' || previous == ',') {
            // jsonb_out's separator space: drop it.
        } else {
            assert!(!c.is_whitespace(), "unexpected white space in {text}");
            if c == '"' {
                in_string = true;
            }
            out.push(c);
        }
        previous = if in_string { '\0' } else { c };
    }
    out
}

const SCHEMA: &str = r#"
SET datestyle = 'ISO, MDY';
SET timezone = 'UTC';
SET extra_float_digits = 1;
CREATE TYPE mood AS ENUM ('happy', 'sad', 'so-so "quoted"');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE DOMAIN label AS text;
CREATE DOMAIN intlist AS int[];
CREATE TYPE inner_t AS (x int, "b b" text, d date, n numeric);
CREATE TYPE outer_t AS (id int, "inner" inner_t, tags text[], ts timestamptz, j json, f float8, dom posint, "with space" text, e mood);
CREATE TABLE everything (
    id int PRIMARY KEY,
    i2 int2, i4 int4, i8 int8, num numeric, f4 float4, f8 float8, b bool,
    t text, vc varchar(100), ch char(6), by bytea, u uuid,
    d date, tm time, ttz timetz, ts timestamp(6), tstz timestamptz,
    iv interval, j json, jb jsonb,
    ai int[], at text[], a2 int[], ad date[], atz timestamptz[], anum numeric[], af8 float8[],
    ajb jsonb[], abox box[], ainner inner_t[], aouter outer_t[], adom posint[], il intlist,
    e mood, comp outer_t, dint posint, dtext label,
    r4 int4range, rtz tstzrange, m money, ip inet, pt point, o oid,
    i2v int2vector, ov oidvector, bx box,
    "Weird ""Name"" \ é" text, "é" int, "A" int, "aa" int
);
"#;

/// Hand-picked values: each becomes a row with only that column set.
const EDGES: &[(&str, &str)] = &[
    ("i2", "-32768"),
    ("i2", "32767"),
    ("i4", "-2147483648"),
    ("i8", "9223372036854775807"),
    ("i8", "-9223372036854775808"),
    ("num", "'NaN'"),
    ("num", "'Infinity'"),
    ("num", "'-Infinity'"),
    ("num", "1.50"),
    ("num", "1e-20"),
    ("num", "-0.000"),
    ("num", "0"),
    ("num", "1e300"),
    (
        "num",
        "'123456789012345678901234567890.123456789012345678901234567890'",
    ),
    ("num", "-1.5e-300"),
    ("num", "(1e1000 + 0.5)"),
    ("f4", "'NaN'"),
    ("f4", "'Infinity'"),
    ("f4", "'-Infinity'"),
    ("f4", "'-0'"),
    ("f4", "3.4028235e38"),
    ("f4", "1.4e-45"),
    ("f4", "1.5e-7"),
    ("f4", "0.1"),
    ("f8", "'NaN'"),
    ("f8", "'Infinity'"),
    ("f8", "'-Infinity'"),
    ("f8", "1e300"),
    ("f8", "1.5e-7"),
    ("f8", "'-0'"),
    ("f8", "5e-324"),
    ("f8", "1.7976931348623157e308"),
    ("f8", "0.1"),
    ("f8", "123456789.125"),
    ("f8", "1e15"),
    ("f8", "1e16"),
    ("f8", "1e-5"),
    ("b", "true"),
    ("b", "false"),
    (
        "t",
        r#"E'quote " backslash \\ slash / tab \t nl \n cr \r bs \b ff \f'"#,
    ),
    ("t", r"E'ctl \x01 \x1f del \x7f'"),
    ("t", "'unicode é ß 中文 😀 \u{2028}'"),
    ("t", "''"),
    ("t", "'NULL'"),
    ("t", "'  spaced  '"),
    ("vc", "'varchar \"x\"'"),
    ("ch", "'ab'"),
    ("ch", "''"),
    ("by", r"'\x00ff10'::bytea"),
    ("by", "''::bytea"),
    ("u", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"),
    ("d", "'2024-01-02'"),
    ("d", "'infinity'"),
    ("d", "'-infinity'"),
    ("d", "'0044-03-15 BC'"),
    ("d", "'4713-01-01 BC'"),
    ("d", "'5874897-12-31'"),
    ("d", "'0001-01-01'"),
    ("tm", "'03:04:05.123456'"),
    ("tm", "'24:00:00'"),
    ("ttz", "'03:04:05+05:30'"),
    ("ttz", "'03:04:05-08'"),
    ("ts", "'2024-01-02 03:04:05.123'"),
    ("ts", "'2024-01-02 03:04:05'"),
    ("ts", "'0044-03-15 10:00:00.5 BC'"),
    ("ts", "'infinity'"),
    ("ts", "'-infinity'"),
    ("ts", "'294276-12-31 23:59:59.999999'"),
    ("tstz", "'2024-01-02 03:04:05+00'"),
    ("tstz", "'2024-01-02 03:04:05.000001+05:30'"),
    ("tstz", "'0044-03-15 10:00:00.5 BC'"),
    ("tstz", "'infinity'"),
    ("tstz", "'-infinity'"),
    ("tstz", "'4713-01-01 00:00:00+00 BC'"),
    ("iv", "'1 year 2 mons 3 days 04:05:06.7'"),
    ("iv", "'-1 day'"),
    (
        "j",
        r#"'{"a":1.0e2,"b":1E+2,"a":3,"c":-0,"d":1.50e1,"e":{"x":null},"f":[null, {"g": null}]}'"#,
    ),
    ("j", r#"'{"a": 1, "a": null}'"#),
    ("j", "'null'"),
    ("j", "'  [ ]  '"),
    ("j", "'{}'"),
    ("j", r#"'"\u00e9\/\u001f\b\ud83d\ude00"'"#),
    ("j", "'-0.0'"),
    ("j", "'1e-16383'"),
    ("j", "'12345678901234567890123456789e-40'"),
    ("j", "'[1e2, 0.1E1, 5e-1, true, false, null]'"),
    (
        "j",
        r#"'{"bb": 1, "a": 2, "": 3, "B": 4, "é": 5, "aa": {"z": [], "y": {}}}'"#,
    ),
    (
        "j",
        "'[0.0e0, -0e-0, 1E-2, 12.3400e+3, 123e-2, 0.000e5, 1e1, -1.5E+1, 0.1e1]'",
    ),
    (
        "j",
        r#"'{"\u0041": 1, "A": 2, "\ud83d\ude00": "\ud83d\ude00", "tab\t": "\/"}'"#,
    ),
    ("j", "'\"x\"'"),
    ("j", "'42'"),
    (
        "jb",
        r#"'{"a": null, "b": {"c": null, "d": [null]}, "é": "\"q\""}'"#,
    ),
    ("jb", "'null'"),
    ("jb", "'[1.50, 1e-3, -0]'"),
    ("jb", "'\"\\\\u0041\"'"),
    ("ai", "'{1,2,NULL}'"),
    ("ai", "'{}'"),
    ("ai", "'[0:2]={1,2,3}'"),
    ("ai", "'[-5:-4]={7,8}'"),
    (
        "at",
        r#"E'{"a b","",NULL,"NULL","q\\"uote","back\\\\slash","{}",x,"a,b"," lead",nULl}'"#,
    ),
    ("a2", "'{{1,2},{3,NULL}}'"),
    ("a2", "'[2:3][5:6]={{1,2},{3,4}}'"),
    ("a2", "'{{{1},{2}}}'"),
    ("ad", "'{2024-01-02,infinity,NULL,0044-03-15 BC}'"),
    ("atz", "'{\"2024-01-02 03:04:05+00\",NULL,infinity}'"),
    ("anum", "'{1.50,NaN,Infinity,-Infinity,NULL,1e-10}'"),
    ("af8", "'{1e300,NaN,-Infinity,-0,1.5e-7}'"),
    (
        "ajb",
        r#"'{"{\"a\": null, \"b\": 1}",NULL,"null","[null]"}'"#,
    ),
    ("abox", "'{(1,1),(0,0);(2,2),(1,1)}'"),
    (
        "ainner",
        r#"ARRAY[ROW(1, 'a "b" c', '2024-01-02', 1.50)::inner_t, NULL, ROW(NULL, NULL, NULL, NULL)::inner_t]"#,
    ),
    (
        "aouter",
        r#"ARRAY[ROW(1, ROW(2, '', 'infinity', 'NaN'), '{a,NULL}', '2024-01-02 03:04:05+00', '{"k": null}', 'Infinity', 5, 'empty name', 'happy')::outer_t]"#,
    ),
    ("adom", "'{1,2,NULL}'"),
    ("il", "'{3,NULL,4}'"),
    ("e", "'happy'"),
    ("e", r#"'so-so "quoted"'"#),
    (
        "comp",
        r#"ROW(1, ROW(2, 'x\y', '0044-03-15 BC', 1e-5), '{"q\"",NULL,""}', '0044-03-15 10:00:00.5 BC', '{"a": [1, null], "b": null}', -0.0, 3, '(,)', 'sad')"#,
    ),
    (
        "comp",
        "ROW(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    ),
    (
        "comp",
        "ROW(NULL, ROW(NULL, NULL, NULL, NULL), '{}', NULL, 'null', NULL, NULL, '', NULL)",
    ),
    ("dint", "42"),
    ("dtext", "'domain \"text\"'"),
    ("r4", "'[1,5)'"),
    ("r4", "'empty'"),
    ("r4", "'(,3]'"),
    ("rtz", "'[2024-01-02 03:04:05+00,infinity)'"),
    ("m", "12.34"),
    ("m", "-1000000.5"),
    ("ip", "'192.168.0.1/24'"),
    ("ip", "'::1'"),
    ("pt", "point(1.5, -2e-7)"),
    ("o", "4294967295"),
    ("o", "0"),
    ("i2v", "'1 2 -3'"),
    ("i2v", "''"),
    ("ov", "'1 23 456'"),
    ("bx", "'(1,2),(3,4)'"),
    (r#""Weird ""Name"" \ é""#, "'w'"),
    ("\"é\"", "1"),
    ("\"A\"", "2"),
    ("aa", "3"),
];

/// A few hundred generated rows (deterministic: `setseed`).
const GENERATED: &str = r#"
SELECT setseed(0.42);
INSERT INTO everything
SELECT 100000 + g,
  CASE WHEN g % 11 = 0 THEN NULL ELSE (random() * 65535 - 32768)::int2 END,
  (random() * 4294967295 - 2147483648)::int4,
  (random() * 1e18 * CASE WHEN g % 2 = 0 THEN -1 ELSE 1 END)::int8,
  round(((random() - 0.5) * power(10::numeric, (floor(random() * 40) - 20)::int))::numeric, (random() * 30)::int),
  ((random() - 0.5) * 10 ^ (random() * 60 - 30))::float4,
  ((random() - 0.5) * 10 ^ (random() * 600 - 300))::float8,
  random() < 0.5,
  (SELECT string_agg(chr(CASE WHEN r < 0.1 THEN 1 + (r * 1000)::int % 31
                              WHEN r < 0.2 THEN 128512 + (r * 1000)::int % 80
                              WHEN r < 0.3 THEN 192 + (r * 1000)::int % 300
                              ELSE 32 + (r * 1000)::int % 95 END), '')
     FROM (SELECT random() + g * 0 AS r FROM generate_series(1, g % 23)) s),
  'v' || g,
  substr(md5(g::text), 1, g % 7),
  decode(md5(g::text), 'hex'),
  md5(g::text)::uuid,
  date '2000-01-01' + (random() * 2000000 - 1000000)::int,
  time '00:00' + random() * interval '24 hours',
  (time '00:00' + random() * interval '24 hours')::timetz,
  timestamp '2000-01-01' + random() * interval '1 year' * (random() * 6000 - 3000)::int,
  timestamptz '2000-01-01 00:00:00+00' + random() * interval '1 year' * (random() * 6000 - 3000)::int,
  random() * interval '1000 days' - interval '500 days',
  ('{"b": ' || g || ', "a": ' || (random() * 100)::numeric(10, 3) || 'e' || (g % 9 - 4)
     || ', "b": ' || CASE WHEN g % 3 = 0 THEN 'null' ELSE '"s' || g || '"' END
     || ', "c": {"d": null, "e": [1, null, ' || (g % 5) || '.0]}, "' || chr(65 + g % 26) || '": ' || (random() < 0.5) || '}')::json,
  jsonb_build_object('k' || (g % 4), random() * 10, 'n', CASE WHEN g % 2 = 0 THEN g END,
     'arr', jsonb_build_array(g, NULL, 'x', jsonb_build_object('z', NULL)), 'ts', now()),
  ARRAY[g, NULL, (random() * 100)::int],
  ARRAY['a b', '', NULL, 'x"y\z', chr(1 + g % 30), 'NULL', g::text],
  CASE WHEN g % 5 = 0 THEN ('[0:1][3:4]={{' || g || ',2},{3,4}}')::int[] ELSE ARRAY[[g, g + 1], [NULL, 3]] END,
  ARRAY[date '2000-01-01' + (random() * 2000000 - 1000000)::int, NULL],
  ARRAY[timestamptz '2000-01-01 00:00:00+00' + random() * interval '1 year' * (random() * 6000 - 3000)::int],
  ARRAY[round(random()::numeric, g % 12), 'NaN'],
  ARRAY[random() * 10 ^ (random() * 600 - 300), -random()],
  ARRAY[jsonb_build_object('a', CASE WHEN g % 2 = 0 THEN NULL ELSE g END), 'null'::jsonb],
  ARRAY[box(point(g, random()), point(-g, 1))],
  ARRAY[ROW(g, 'n ' || g, date '2000-01-01' - g * 1000, g / 7.0)::inner_t],
  ARRAY[ROW(g, ROW(NULL, '"', NULL, 1.5), ARRAY['a', NULL], now(), '{"x": null}', random(), g % 9 + 1, ',', 'sad')::outer_t, NULL],
  ARRAY[(g % 50 + 1)::posint],
  ARRAY[g, NULL]::intlist,
  (ARRAY['happy', 'sad', 'so-so "quoted"'])[1 + g % 3]::mood,
  ROW(g, ROW(g % 3, 'in(' || g || ')', date '2000-01-01' + g, CASE WHEN g % 4 = 0 THEN 'NaN' ELSE g * 1.25 END),
      ARRAY[g::text, NULL, '', '\'], timestamptz '1970-01-01 00:00:00+00' + g * interval '1 day 1 second',
      CASE WHEN g % 3 = 0 THEN 'null' ELSE '{"a": ' || g || ', "a": null}' END,
      random() * 1e10, NULLIF(g % 4, 0), CASE WHEN g % 2 = 0 THEN '' END, 'happy')::outer_t,
  (g % 100 + 1)::posint,
  'label ' || g,
  int4range(g, g + (random() * 10)::int),
  tstzrange(timestamptz '2024-01-01 00:00:00+00', timestamptz '2024-01-01 00:00:00+00' + g * interval '1 hour'),
  ((random() - 0.5) * 10000)::numeric::money,
  ('10.' || g % 256 || '.' || (g * 7) % 256 || '.1')::inet,
  point(random() * 1e-3, -random() * 1e20),
  g::oid,
  ('1 ' || g % 100)::int2vector,
  (g || ' 0')::oidvector,
  box(point(g, g), point(0, 0)),
  'weird ' || g, g, -g, g * 2
FROM generate_series(1, 300) g;
"#;

async fn connect() -> Client {
    let db = evolve_test::fresh_db("document").await;
    let (client, connection) = tokio_postgres::connect(&db.url, NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
        .batch_execute(
            "SET datestyle = 'ISO, MDY'; SET timezone = 'UTC'; SET extra_float_digits = 1",
        )
        .await
        .expect("session settings");
    client
}

fn rows(messages: Vec<SimpleQueryMessage>) -> Vec<tokio_postgres::SimpleQueryRow> {
    messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn documents_match_the_server_for_every_type() {
    let client = connect().await;
    client.batch_execute(SCHEMA).await.expect("schema");
    for (n, (column, literal)) in EDGES.iter().enumerate() {
        client
            .batch_execute(&format!(
                "INSERT INTO everything (id, {column}) VALUES ({n}, {literal})"
            ))
            .await
            .unwrap_or_else(|e| panic!("edge {column} = {literal}: {e:?}"));
    }
    // One row of NULLs only (apart from the key), one with every edge column
    // of the first rows combined.
    client
        .batch_execute("INSERT INTO everything (id) VALUES (50000)")
        .await
        .expect("null row");
    client
        .batch_execute(GENERATED)
        .await
        .expect("generated rows");

    let columns = catalog::table_columns(&client, "everything")
        .await
        .expect("catalog");
    assert!(matches!(columns[0].kind, TypeKind::Integer));
    let encoder = RowEncoder::new(columns.clone()).expect("encoder");

    // Every column's output function text, and the server's document.
    let result = rows(
        client
            .simple_query(
                "SELECT r.*, coalesce(jsonb_strip_nulls(to_jsonb(r)), '{}'::jsonb)::text \
                 FROM everything r ORDER BY id",
            )
            .await
            .expect("select"),
    );
    let mut ids: Vec<i32> = Vec::new();
    let mut ours: Vec<String> = Vec::new();
    let mut mismatches = Vec::new();
    let mut values_compared = 0usize;
    let mut out = Vec::new();
    for row in &result {
        assert_eq!(row.len(), columns.len() + 1);
        let values: Vec<Option<&[u8]>> = (0..columns.len())
            .map(|i| row.get(i).map(str::as_bytes))
            .collect();
        values_compared += values.iter().filter(|v| v.is_some()).count();
        let server = row.get(columns.len()).expect("document is never NULL");
        out.clear();
        if let Err(e) = encoder.encode(&values, &mut out) {
            mismatches.push(format!("row {:?}: our encoder failed: {e}", row.get(0)));
            continue;
        }
        let doc = String::from_utf8(out.clone()).expect("UTF-8");
        let expected = compact_jsonb_text(server);
        if doc != expected {
            mismatches.push(format!(
                "row {:?}:\n  ours   {doc}\n  server {expected}",
                row.get(0)
            ));
        }
        ids.push(row.get(0).expect("id").parse().expect("int id"));
        ours.push(doc);
    }
    // Our bytes, sent as text and read as jsonb, equal the server's document.
    let differing = client
        .query(
            "SELECT r.id, u.ours FROM everything r \
             JOIN unnest($1::int4[], $2::text[]) AS u(id, ours) USING (id) \
             WHERE u.ours::jsonb IS DISTINCT FROM coalesce(jsonb_strip_nulls(to_jsonb(r)), '{}'::jsonb)",
            &[&ids, &ours],
        )
        .await
        .expect("jsonb comparison");
    for row in &differing {
        mismatches.push(format!(
            "row {}: not = as jsonb: {}",
            row.get::<_, i32>(0),
            row.get::<_, String>(1)
        ));
    }
    println!(
        "compared {} rows x {} columns ({} non-NULL values) with the server",
        result.len(),
        columns.len(),
        values_compared
    );
    assert!(result.len() > 300 && columns.len() > 40 && values_compared > 0);
    assert!(
        mismatches.is_empty(),
        "{} mismatches in {} rows:\n{}",
        mismatches.len(),
        result.len(),
        mismatches.join("\n")
    );
}

#[tokio::test]
async fn keys_match_the_server() {
    let client = connect().await;
    client
        .batch_execute(
            "CREATE TABLE keyed (tenant text, id bigint, at timestamptz, PRIMARY KEY (tenant, id, at)); \
             INSERT INTO keyed VALUES ('a \"b\"', 9223372036854775807, '2024-01-02 03:04:05.5+00'), \
                                      ('é', -1, '0044-03-15 00:00:00+00 BC')",
        )
        .await
        .expect("schema");
    let columns = catalog::table_columns(&client, "keyed")
        .await
        .expect("catalog");
    let result = rows(
        client
            .simple_query(
                "SELECT tenant, id, at, jsonb_build_object('tenant', tenant, 'id', id, 'at', at)::text \
                 FROM keyed ORDER BY id",
            )
            .await
            .expect("select"),
    );
    assert_eq!(result.len(), 2);
    for row in &result {
        let values: Vec<Option<&[u8]>> = (0..3).map(|i| row.get(i).map(str::as_bytes)).collect();
        let mut out = Vec::new();
        encode_key(&columns, &values, &mut out).expect("key");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            compact_jsonb_text(row.get(3).unwrap())
        );
    }
}

/// Values the server stores but cannot turn into jsonb: our encoder refuses
/// them too, rather than inventing a document.
#[tokio::test]
async fn values_the_server_cannot_convert_are_refused() {
    let client = connect().await;
    client
        .batch_execute("CREATE TABLE odd (j json)")
        .await
        .expect("schema");
    let columns = catalog::table_columns(&client, "odd")
        .await
        .expect("catalog");
    for text in [r#""\u0000""#, "1e-16384", "1e131072", r#"{"a": 0e-20000}"#] {
        client
            .batch_execute("TRUNCATE odd")
            .await
            .expect("truncate");
        client
            .execute("INSERT INTO odd VALUES ($1::text::json)", &[&text])
            .await
            .unwrap_or_else(|e| panic!("json {text} is storable: {e:?}"));
        let server = client
            .simple_query("SELECT to_jsonb(t)::text FROM odd t")
            .await;
        assert!(server.is_err(), "the server converted {text}");
        let mut out = Vec::new();
        let ours = encode_key(&columns, &[Some(text.as_bytes())], &mut out);
        assert!(
            matches!(ours, Err(DocumentError::Value { .. })),
            "{text}: we gave {ours:?}"
        );
    }
}

#[test]
fn compacting_keeps_strings_intact() {
    assert_eq!(
        compact_jsonb_text(r#"{"a": [1, 2], "b, c": "x: y, \"z\", \\", "d": {}}"#),
        r#"{"a":[1,2],"b, c":"x: y, \"z\", \\","d":{}}"#
    );
    let _ = Column::new("unused", TypeKind::Text);
}
