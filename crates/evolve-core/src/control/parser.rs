//! The parser: recursive descent over the lexer's tokens, one token of
//! lookahead (two for `IF [NOT] EXISTS`), no backtracking.

use std::collections::HashSet;

use super::error::ControlError;
use super::lexer::{STATEMENT_STARTS, Tok, Token, is_reserved, lex, near};
use super::{
    Absorb, AlterMaterializedView, AlterReplica, ApplyReplacement, CreateMaterializedView,
    CreateReplacement, CreateReplica, CreateSink, CreateSource, CreateTable, CreateTransform, Drop,
    EnableReplica, KafkaSink, KafkaTable, KeyFormat, MAX_IDENTIFIER_BYTES, ObjectKind,
    QualifiedName, RefreshReferences, Show, ShowConflictResolvers, SinkEnvelope, SinkFormat,
    SourceKind, Span, Statement, TableEnvelope, TableFormat, parse_duration,
};
use crate::conflict::{ConflictError, ConflictType, Resolver};

/// Parses `input` into statements, in input order. Empty input (or only
/// comments and `;`) is no statements. The first error ends the parse.
pub fn parse(input: &str) -> Result<Vec<Statement>, ControlError> {
    let lexed = lex(input);
    let mut parser = Parser {
        input,
        tokens: lexed.tokens,
        lex_error: lexed.error,
        pos: 0,
        prev_end: 0,
    };
    let mut statements = Vec::new();
    loop {
        while parser.at_punct(';') {
            parser.bump();
        }
        match parser.peek().tok {
            Tok::Eof => return Ok(statements),
            Tok::Error => return Err(parser.lex_error()),
            _ => statements.push(parser.statement()?),
        }
    }
}

/// The hint for an unknown statement.
const SUPPORTED: &str = "The supported statements are CREATE SOURCE, \
CREATE TABLE ... FROM SOURCE, CREATE [REPLACEMENT] MATERIALIZED VIEW, CREATE SINK, \
CREATE REPLICA, CREATE TRANSFORM, \
ALTER SOURCE ... REFRESH REFERENCES, \
ALTER MATERIALIZED VIEW ... {APPLY REPLACEMENT | SET | RESET}, \
ALTER REPLICA ... {SET | RESET} CONFLICT RESOLVER, \
DROP {SOURCE | TABLE | MATERIALIZED VIEW | SINK | REPLICA | TRANSFORM} and \
SHOW {SOURCES | TABLES | MATERIALIZED VIEWS | SINKS | REPLICAS | TRANSFORMS | \
CONFLICT RESOLVERS FOR REPLICA ...}.";

/// The values of `COPY DATA`, for hints.
const COPY_DATA_VALUES: &str = "COPY DATA is true or false (or on, off, yes, no, 1, 0).";
const ENABLED_VALUES: &str = "ENABLED is true or false (or on, off, yes, no, 1, 0).";

/// The options of a materialized view, for [`Parser::options`].
const VIEW_OPTIONS: &[(&str, &str)] = &[("absorb", "ABSORB")];

/// The values of `ABSORB`, for hints.
const ABSORB_VALUES: &str = "ABSORB is 'auto' or 'manual'.";

/// The values of `WAIT`, for hints.
const WAIT_VALUES: &str = "WAIT is a duration: numbers each with a unit (ms, s, m or min, h, d), as in '60s', '500ms' or '1m30s'.";

const INTERFACE_FORM: &str = "SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) \
AS data FROM table_name t";

/// What the parser would have accepted where a syntax error is, for hints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expected {
    Keyword(&'static str),
    Punct(char),
    Name,
    Literal,
    Expression,
    End,
}

impl Expected {
    fn describe(self) -> String {
        match self {
            Expected::Keyword(k) => k.to_ascii_uppercase(),
            Expected::Punct(c) => format!("\"{c}\""),
            Expected::Name => "a name".to_owned(),
            Expected::Literal => "a string literal".to_owned(),
            Expected::Expression => "an expression".to_owned(),
            Expected::End => "end of input".to_owned(),
        }
    }
}

struct Parser<'a> {
    input: &'a str,
    /// Ends with an `Eof` or `Error` token, which the parser never moves past.
    tokens: Vec<Token>,
    lex_error: Option<ControlError>,
    pos: usize,
    /// End of the last token consumed.
    prev_end: usize,
}

impl Parser<'_> {
    // ------------------------------------------------------------ tokens

    fn peek(&self) -> &Token {
        self.peek_nth(0)
    }

    fn peek_nth(&self, n: usize) -> &Token {
        let last = self.tokens.len() - 1;
        &self.tokens[(self.pos + n).min(last)]
    }

    fn bump(&mut self) {
        if self.pos + 1 < self.tokens.len() {
            self.prev_end = self.tokens[self.pos].end;
            self.pos += 1;
        }
    }

    fn word(&self) -> Option<&str> {
        match &self.peek().tok {
            Tok::Word(w) => Some(w),
            _ => None,
        }
    }

    fn at_word(&self, word: &str) -> bool {
        self.word() == Some(word)
    }

    fn at_punct(&self, c: char) -> bool {
        self.peek().tok == Tok::Punct(c)
    }

    fn at_end(&self) -> bool {
        matches!(self.peek().tok, Tok::Eof | Tok::Punct(';'))
    }

    fn raw(&self, token: &Token) -> &str {
        &self.input[token.start..token.end]
    }

    fn span_from(&self, start: usize) -> Span {
        Span {
            start,
            end: self.prev_end,
        }
    }

    // ------------------------------------------------------------ errors

    fn lex_error(&self) -> ControlError {
        self.lex_error.clone().unwrap_or_else(|| {
            ControlError::new(
                self.input,
                self.peek().start,
                "syntax error at end of input",
            )
        })
    }

    fn error_at(&self, offset: usize, message: impl Into<String>) -> ControlError {
        ControlError::new(self.input, offset, message)
    }

    /// `syntax error at or near "..."` at the current token, with no hint;
    /// the lexer's error instead when the lexer stopped here.
    fn bare_syntax_error(&self) -> ControlError {
        let token = self.peek();
        match token.tok {
            Tok::Error => self.lex_error(),
            Tok::Eof => self.error_at(token.start, "syntax error at end of input"),
            _ => self.error_at(
                token.start,
                format!("syntax error at or near {}", near(self.raw(token))),
            ),
        }
    }

    /// A syntax error at the current token: the hint suggests a close
    /// keyword among `expected` if there is one, and lists `expected`
    /// otherwise.
    fn syntax_error(&self, expected: &[Expected]) -> ControlError {
        let err = self.bare_syntax_error();
        if self.peek().tok == Tok::Error {
            return err;
        }
        if let Some(keyword) = self.suggestion(expected.iter().filter_map(|e| match e {
            Expected::Keyword(k) => Some(*k),
            _ => None,
        })) {
            return err.with_hint(format!("Did you mean {}?", keyword.to_ascii_uppercase()));
        }
        if let Some(word) = self.word()
            && expected.contains(&Expected::Name)
            && is_reserved(word)
        {
            return err.with_hint(format!(
                "Expected a name. {} is a reserved keyword; write \"{word}\" in double quotes \
                 to use it as a name.",
                word.to_ascii_uppercase()
            ));
        }
        err.with_hint(format!("Expected {}.", list(expected)))
    }

    /// A syntax error where a statement (or the word after `CREATE`,
    /// `ALTER`, `DROP` or `SHOW`) should be: suggests a close keyword among
    /// `keywords`, or lists the supported statements.
    fn statement_error(&self, keywords: &[&'static str]) -> ControlError {
        let err = self.bare_syntax_error();
        if self.peek().tok == Tok::Error {
            return err;
        }
        match self.suggestion(keywords.iter().copied()) {
            Some(keyword) => {
                err.with_hint(format!("Did you mean {}?", keyword.to_ascii_uppercase()))
            }
            None => err.with_hint(SUPPORTED),
        }
    }

    /// The keyword closest to the current (unquoted) word, if it is close
    /// enough to be a typo: one edit (a transposition is one) for keywords
    /// of up to five letters, two for longer ones.
    fn suggestion(&self, keywords: impl Iterator<Item = &'static str>) -> Option<&'static str> {
        let word = self.word()?;
        let mut best: Option<(usize, &'static str)> = None;
        for keyword in keywords {
            let limit = if keyword.len() <= 5 { 1 } else { 2 };
            if word.len() < 2 || word.len().abs_diff(keyword.len()) > limit {
                continue;
            }
            let distance = strsim::osa_distance(word, keyword);
            if distance > 0 && distance <= limit && best.is_none_or(|(d, _)| distance < d) {
                best = Some((distance, keyword));
            }
        }
        best.map(|(_, k)| k)
    }

    // ------------------------------------------------------------ pieces

    fn expect_keyword(&mut self, keyword: &'static str) -> Result<(), ControlError> {
        if self.at_word(keyword) {
            self.bump();
            Ok(())
        } else {
            Err(self.syntax_error(&[Expected::Keyword(keyword)]))
        }
    }

    fn expect_punct(&mut self, c: char) -> Result<(), ControlError> {
        if self.at_punct(c) {
            self.bump();
            Ok(())
        } else {
            Err(self.syntax_error(&[Expected::Punct(c)]))
        }
    }

    /// `,` (true: the list goes on) or `)` (false: it ended).
    fn comma_or_close(&mut self) -> Result<bool, ControlError> {
        if self.at_punct(',') {
            self.bump();
            Ok(true)
        } else if self.at_punct(')') {
            self.bump();
            Ok(false)
        } else {
            Err(self.syntax_error(&[Expected::Punct(','), Expected::Punct(')')]))
        }
    }

    /// The end of a statement: `;` or the end of the input. `optional`
    /// lists the keywords that could have continued it, for hints.
    fn expect_end(&self, optional: &[&'static str]) -> Result<(), ControlError> {
        if self.at_end() {
            return Ok(());
        }
        if let Some(word) = self.word()
            && STATEMENT_STARTS.contains(&word)
            && self.suggestion(optional.iter().copied()).is_none()
        {
            return Err(self.missing_semicolon());
        }
        let mut expected: Vec<Expected> = optional.iter().map(|k| Expected::Keyword(k)).collect();
        expected.extend([Expected::Punct(';'), Expected::End]);
        Err(self.syntax_error(&expected))
    }

    /// A statement starts at the current token where the previous one
    /// should have ended.
    fn missing_semicolon(&self) -> ControlError {
        self.bare_syntax_error()
            .with_hint("End the previous statement with \";\".")
    }

    /// `=` between an option's name and its value is optional.
    fn optional_equals(&mut self) {
        if self.peek().tok == Tok::Op && self.raw(self.peek()) == "=" {
            self.bump();
        }
    }

    /// An identifier: an unquoted word that PostgreSQL does not reserve
    /// (folded), or a quoted identifier; at most 63 bytes.
    fn name(&mut self) -> Result<(String, Span), ControlError> {
        let token = self.peek().clone();
        let name = match token.tok {
            Tok::Word(w) if !is_reserved(&w) => w,
            Tok::Quoted(q) => q,
            _ => return Err(self.syntax_error(&[Expected::Name])),
        };
        self.check_length(&name, token.start)?;
        self.bump();
        Ok((
            name,
            Span {
                start: token.start,
                end: token.end,
            },
        ))
    }

    fn check_length(&self, name: &str, at: usize) -> Result<(), ControlError> {
        if name.len() > MAX_IDENTIFIER_BYTES {
            return Err(self
                .error_at(at, format!("identifier {} is too long", near(name)))
                .with_detail(format!(
                    "It is {} bytes long; identifiers are at most {MAX_IDENTIFIER_BYTES} bytes, \
                     as in PostgreSQL.",
                    name.len()
                )));
        }
        Ok(())
    }

    fn literal(&mut self) -> Result<(String, usize), ControlError> {
        let token = self.peek().clone();
        match token.tok {
            Tok::Str(s) => {
                self.bump();
                Ok((s, token.start))
            }
            _ => Err(self.syntax_error(&[Expected::Literal])),
        }
    }

    /// `( option [=] value [, ...] )` where each option is one of `allowed`
    /// (keyword and its display name, e.g. `("exclude", "EXCLUDE
    /// COLUMNS")`) and may appear once; `value` parses what follows the
    /// keyword.
    fn options(
        &mut self,
        allowed: &[(&'static str, &'static str)],
        mut value: impl FnMut(&mut Self, &'static str) -> Result<(), ControlError>,
    ) -> Result<(), ControlError> {
        self.expect_punct('(')?;
        let mut seen: Vec<&'static str> = Vec::new();
        loop {
            let at = self.peek().start;
            let Some(&(keyword, display)) = allowed.iter().find(|(k, _)| self.at_word(k)) else {
                let expected: Vec<Expected> =
                    allowed.iter().map(|(k, _)| Expected::Keyword(k)).collect();
                return Err(self.syntax_error(&expected));
            };
            if seen.contains(&keyword) {
                return Err(self
                    .error_at(at, "conflicting or redundant options")
                    .with_detail(format!("{display} is specified more than once.")));
            }
            seen.push(keyword);
            self.bump();
            value(self, keyword)?;
            if !self.comma_or_close()? {
                return Ok(());
            }
        }
    }

    /// `[=] ( column [, ...] )`: at least one column, each once.
    fn column_list(&mut self, option: &str) -> Result<Vec<(String, Span)>, ControlError> {
        self.optional_equals();
        self.expect_punct('(')?;
        if self.at_punct(')') {
            return Err(self
                .error_at(self.peek().start, format!("empty column list in {option}"))
                .with_hint(format!("List at least one column, or leave out {option}.")));
        }
        let mut columns: Vec<(String, Span)> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        loop {
            let (column, span) = self.name()?;
            if !seen.insert(column.clone()) {
                return Err(self
                    .error_at(
                        span.start,
                        format!("column \"{column}\" specified more than once"),
                    )
                    .with_detail(format!("{option} lists it twice.")));
            }
            columns.push((column, span));
            if !self.comma_or_close()? {
                return Ok(columns);
            }
        }
    }

    /// `name` or `schema.name`.
    fn qualified_name(&mut self) -> Result<QualifiedName, ControlError> {
        let start = self.peek().start;
        let (first, _) = self.name()?;
        if !self.at_punct('.') {
            return Ok(QualifiedName::new("public", first));
        }
        self.bump();
        let (second, _) = self.name()?;
        if !self.at_punct('.') {
            return Ok(QualifiedName::new(first, second));
        }
        let mut parts = vec![first, second];
        while self.at_punct('.') {
            self.bump();
            parts.push(self.name()?.0);
        }
        Err(self.error_at(
            start,
            format!(
                "improper qualified name (too many dotted names): {}",
                parts.join(".")
            ),
        ))
    }

    /// `IF NOT EXISTS` after `CREATE ... kind`. `if` is a name unless
    /// `not` (which PostgreSQL reserves, so no name) follows it.
    fn if_not_exists(&mut self) -> Result<bool, ControlError> {
        if !(self.at_word("if") && self.peek_nth(1).tok == Tok::Word("not".into())) {
            return Ok(false);
        }
        self.bump();
        self.bump();
        self.expect_keyword("exists")?;
        Ok(true)
    }

    // ------------------------------------------------------------ statements

    fn statement(&mut self) -> Result<Statement, ControlError> {
        let start = self.peek().start;
        match self.word() {
            Some("create") => {
                self.bump();
                self.create(start)
            }
            Some("alter") => {
                self.bump();
                self.alter(start)
            }
            Some("drop") => {
                self.bump();
                self.drop(start)
            }
            Some("show") => {
                self.bump();
                self.show(start)
            }
            _ => Err(self.statement_error(STATEMENT_STARTS)),
        }
    }

    fn create(&mut self, start: usize) -> Result<Statement, ControlError> {
        match self.word() {
            Some("source") => {
                self.bump();
                self.create_source(start)
            }
            Some("table") => {
                self.bump();
                self.create_table(start)
            }
            Some("materialized") => {
                self.bump();
                self.expect_keyword("view")?;
                self.create_view(start, false)
            }
            Some("replacement") => {
                self.bump();
                self.expect_keyword("materialized")?;
                self.expect_keyword("view")?;
                self.create_view(start, true)
            }
            Some("sink") => {
                self.bump();
                self.create_sink(start)
            }
            Some("replica") => {
                self.bump();
                self.create_replica(start)
            }
            Some("transform") => {
                self.bump();
                self.create_transform(start)
            }
            _ => Err(self.statement_error(&[
                "source",
                "table",
                "materialized",
                "replacement",
                "sink",
                "replica",
                "transform",
            ])),
        }
    }

    fn create_source(&mut self, start: usize) -> Result<Statement, ControlError> {
        let if_not_exists = self.if_not_exists()?;
        let (name, _) = self.name()?;
        self.expect_keyword("from")?;
        if self.at_word("mysql") {
            self.bump();
            self.expect_keyword("connection")?;
            let (connection, _) = self.name()?;
            if self.at_punct('(') {
                return Err(self
                    .error_at(self.peek().start, "a MySQL source takes no options")
                    .with_hint(
                        "It reads the server's binlog; choose its tables with CREATE TABLE ... FROM SOURCE.",
                    ));
            }
            self.expect_end(&[])?;
            return Ok(Statement::CreateSource(CreateSource {
                name,
                if_not_exists,
                kind: SourceKind::Mysql,
                connection,
                publication: String::new(),
                span: self.span_from(start),
            }));
        }
        if self.at_word("kafka") {
            self.bump();
            self.expect_keyword("connection")?;
            let (connection, _) = self.name()?;
            let mut topic = None;
            self.options(&[("topic", "TOPIC")], |p, _| {
                p.optional_equals();
                let (value, at) = p.literal()?;
                p.check_topic(&value, at)?;
                topic = Some(value);
                Ok(())
            })?;
            self.expect_end(&[])?;
            return Ok(Statement::CreateSource(CreateSource {
                name,
                if_not_exists,
                kind: SourceKind::Kafka,
                connection,
                publication: topic.unwrap_or_default(),
                span: self.span_from(start),
            }));
        }
        if !self.at_word("postgres") {
            return Err(self.syntax_error(&[
                Expected::Keyword("postgres"),
                Expected::Keyword("mysql"),
                Expected::Keyword("kafka"),
            ]));
        }
        self.bump();
        self.expect_keyword("connection")?;
        let (connection, _) = self.name()?;
        let mut publication = String::new();
        self.options(&[("publication", "PUBLICATION")], |p, _| {
            p.optional_equals();
            let (value, at) = p.literal()?;
            if value.is_empty() {
                return Err(p.error_at(at, "publication name cannot be empty"));
            }
            publication = value;
            Ok(())
        })?;
        self.expect_end(&[])?;
        Ok(Statement::CreateSource(CreateSource {
            name,
            if_not_exists,
            kind: SourceKind::Postgres,
            connection,
            publication,
            span: self.span_from(start),
        }))
    }

    fn create_table(&mut self, start: usize) -> Result<Statement, ControlError> {
        let if_not_exists = self.if_not_exists()?;
        let (name, _) = self.name()?;
        self.expect_keyword("from")?;
        self.expect_keyword("source")?;
        let (source, _) = self.name()?;
        let mut reference = None;
        let mut kafka = None;
        if self.at_word("format") || self.at_word("key") {
            // `KEY FORMAT f VALUE FORMAT ...`, or the value's alone.
            let mut key_format = None;
            let key_at = self.peek().start;
            if self.at_word("key") {
                self.bump();
                self.expect_keyword("format")?;
                match self.word().and_then(KeyFormat::parse) {
                    Some(f) => {
                        key_format = Some(f);
                        self.bump();
                    }
                    None => {
                        return Err(self.syntax_error(&[
                            Expected::Keyword("text"),
                            Expected::Keyword("bytes"),
                            Expected::Keyword("avro"),
                            Expected::Keyword("json"),
                            Expected::Keyword("protobuf"),
                        ]));
                    }
                }
                self.expect_keyword("value")?;
            }
            self.expect_keyword("format")?;
            let format = match self.word().and_then(TableFormat::parse) {
                Some(format) => {
                    self.bump();
                    format
                }
                None => {
                    return Err(self.syntax_error(&[
                        Expected::Keyword("avro"),
                        Expected::Keyword("json"),
                        Expected::Keyword("protobuf"),
                    ]));
                }
            };
            let mut message = None;
            if format == TableFormat::Protobuf && self.at_word("message") {
                self.bump();
                let (name, _) = self.literal()?;
                message = Some(name);
            }
            for keyword in ["using", "confluent", "schema", "registry", "connection"] {
                self.expect_keyword(keyword)?;
            }
            let (registry, _) = self.name()?;
            let mut subject = None;
            if self.at_word("subject") {
                self.bump();
                let (name, _) = self.literal()?;
                subject = Some(name);
            }
            let mut envelope = TableEnvelope::Upsert;
            if self.at_word("envelope") {
                self.bump();
                match self.word().and_then(TableEnvelope::parse) {
                    Some(e) => {
                        envelope = e;
                        self.bump();
                    }
                    None => {
                        return Err(self.syntax_error(&[
                            Expected::Keyword("upsert"),
                            Expected::Keyword("none"),
                            Expected::Keyword("debezium"),
                        ]));
                    }
                }
            }
            if key_format.is_some() && !envelope.keyed() {
                return Err(self
                    .error_at(
                        key_at,
                        "KEY FORMAT is for ENVELOPE UPSERT and ENVELOPE DEBEZIUM tables; an ENVELOPE NONE table does not read keys",
                    )
                    .with_hint("Leave KEY FORMAT ... VALUE out, or read the topic with a keyed envelope."));
            }
            kafka = Some(KafkaTable {
                registry,
                envelope,
                format,
                key_format,
                message,
                subject,
            });
        } else {
            self.options(&[("reference", "REFERENCE")], |p, _| {
                p.optional_equals();
                reference = Some(p.qualified_name()?);
                Ok(())
            })?;
        }
        let mut exclude: Vec<(String, Span)> = Vec::new();
        let mut text: Vec<(String, Span)> = Vec::new();
        if self.at_word("with") {
            self.bump();
            self.options(
                &[("exclude", "EXCLUDE COLUMNS"), ("text", "TEXT COLUMNS")],
                |p, keyword| {
                    p.expect_keyword("columns")?;
                    let (option, other_option, list, other) = if keyword == "exclude" {
                        ("EXCLUDE COLUMNS", "TEXT COLUMNS", &mut exclude, &text)
                    } else {
                        ("TEXT COLUMNS", "EXCLUDE COLUMNS", &mut text, &exclude)
                    };
                    *list = p.column_list(option)?;
                    let other: HashSet<&str> = other.iter().map(|(c, _)| c.as_str()).collect();
                    if let Some((column, span)) =
                        list.iter().find(|(c, _)| other.contains(c.as_str()))
                    {
                        return Err(p
                            .error_at(
                                span.start,
                                format!(
                                    "column \"{column}\" is in both {other_option} and {option}"
                                ),
                            )
                            .with_hint(
                                "An excluded column is not ingested, so it cannot be ingested \
                                 as text; remove it from one of the lists.",
                            ));
                    }
                    Ok(())
                },
            )?;
            self.expect_end(&[])?;
        } else {
            self.expect_end(&["with"])?;
        }
        Ok(Statement::CreateTable(CreateTable {
            name,
            if_not_exists,
            source,
            reference: reference.unwrap_or_else(|| QualifiedName::new("", "")),
            exclude_columns: exclude.into_iter().map(|(c, _)| c).collect(),
            text_columns: text.into_iter().map(|(c, _)| c).collect(),
            kafka,
            span: self.span_from(start),
        }))
    }

    fn create_view(&mut self, start: usize, replacement: bool) -> Result<Statement, ControlError> {
        let if_not_exists = self.if_not_exists()?;
        let (name, _) = self.name()?;
        let mut absorb = Absorb::default();
        let target = if replacement {
            if self.at_word("with") {
                return Err(self.replacement_options(None));
            }
            self.expect_keyword("for")?;
            let (target, _) = self.name()?;
            if self.at_word("with") {
                return Err(self.replacement_options(Some(&target)));
            }
            self.expect_keyword("as")?;
            Some(target)
        } else {
            if self.at_word("with") {
                self.bump();
                self.options(VIEW_OPTIONS, |p, _| {
                    absorb = p.absorb_value()?;
                    Ok(())
                })?;
                self.expect_keyword("as")?;
            } else if self.at_word("as") {
                self.bump();
            } else {
                return Err(
                    self.syntax_error(&[Expected::Keyword("with"), Expected::Keyword("as")])
                );
            }
            None
        };
        let table = Interface {
            parser: self,
            replacement,
        }
        .query()?;
        let span = self.span_from(start);
        Ok(match target {
            Some(target) => Statement::CreateReplacement(CreateReplacement {
                name,
                if_not_exists,
                target,
                table,
                span,
            }),
            None => Statement::CreateMaterializedView(CreateMaterializedView {
                name,
                if_not_exists,
                table,
                absorb,
                span,
            }),
        })
    }

    /// `[=] 'auto' | 'manual'`, the literal in any case.
    fn absorb_value(&mut self) -> Result<Absorb, ControlError> {
        self.optional_equals();
        let token = self.peek();
        let Tok::Str(value) = &token.tok else {
            let err = self.bare_syntax_error();
            return Err(if token.tok == Tok::Error {
                err
            } else {
                err.with_hint(format!("Expected a string literal: {ABSORB_VALUES}"))
            });
        };
        let absorb = if value.eq_ignore_ascii_case("auto") {
            Absorb::Auto
        } else if value.eq_ignore_ascii_case("manual") {
            Absorb::Manual
        } else {
            return Err(self
                .error_at(
                    token.start,
                    format!("invalid value for option ABSORB: {}", near(value)),
                )
                .with_hint(ABSORB_VALUES));
        };
        self.bump();
        Ok(absorb)
    }

    /// `[=] 'duration'`, as [`parse_duration`] reads it.
    fn wait_value(&mut self) -> Result<std::time::Duration, ControlError> {
        self.optional_equals();
        let token = self.peek();
        let Tok::Str(value) = &token.tok else {
            let err = self.bare_syntax_error();
            return Err(if token.tok == Tok::Error {
                err
            } else {
                err.with_hint(format!("Expected a string literal: {WAIT_VALUES}"))
            });
        };
        let Some(wait) = parse_duration(value) else {
            return Err(self
                .error_at(
                    token.start,
                    format!("invalid value for option WAIT: {}", near(value)),
                )
                .with_hint(WAIT_VALUES));
        };
        self.bump();
        Ok(wait)
    }

    /// `WITH` after `CREATE REPLACEMENT MATERIALIZED VIEW name [FOR target]`.
    fn replacement_options(&self, target: Option<&str>) -> ControlError {
        let target = target.map_or("target_view".into(), super::sql_ident);
        self.error_at(
            self.peek().start,
            "a replacement materialized view takes no options",
        )
        .with_detail(
            "Applying a replacement leaves the options of the materialized view it replaces \
             as they are.",
        )
        .with_hint(format!(
            "Options belong to the materialized view itself; change them with \
             ALTER MATERIALIZED VIEW {target} SET (...)."
        ))
    }

    fn create_sink(&mut self, start: usize) -> Result<Statement, ControlError> {
        let if_not_exists = self.if_not_exists()?;
        let (name, _) = self.name()?;
        self.expect_keyword("from")?;
        let (from, _) = self.name()?;
        self.expect_keyword("into")?;
        if self.at_word("kafka") {
            self.bump();
            return self.create_kafka_sink(start, name, if_not_exists, from);
        }
        if !self.at_word("postgres") {
            return Err(
                self.syntax_error(&[Expected::Keyword("postgres"), Expected::Keyword("kafka")])
            );
        }
        self.bump();
        self.expect_keyword("connection")?;
        let (connection, _) = self.name()?;
        let mut table = None;
        self.options(&[("table", "TABLE")], |p, _| {
            p.optional_equals();
            let (value, at) = p.literal()?;
            table = Some(p.table_literal(&value, at)?);
            Ok(())
        })?;
        self.expect_end(&[])?;
        Ok(Statement::CreateSink(CreateSink {
            name,
            if_not_exists,
            from,
            connection,
            table: table.unwrap_or_else(|| QualifiedName::new("", "")),
            kafka: None,
            span: self.span_from(start),
        }))
    }

    /// The rest of `CREATE SINK ... INTO KAFKA`: `CONNECTION c (TOPIC
    /// 'topic') [FORMAT JSON | FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY
    /// CONNECTION r] [ENVELOPE UPSERT | ENVELOPE DEBEZIUM]`.
    fn create_kafka_sink(
        &mut self,
        start: usize,
        name: String,
        if_not_exists: bool,
        from: String,
    ) -> Result<Statement, ControlError> {
        self.expect_keyword("connection")?;
        let (connection, _) = self.name()?;
        let mut topic = String::new();
        self.options(&[("topic", "TOPIC")], |p, _| {
            p.optional_equals();
            let (value, at) = p.literal()?;
            p.check_topic(&value, at)?;
            topic = value;
            Ok(())
        })?;
        let mut format = SinkFormat::Json;
        let format_given = self.at_word("format");
        if format_given {
            self.bump();
            match self.word() {
                Some("json") => self.bump(),
                Some("avro") => {
                    self.bump();
                    for keyword in ["using", "confluent", "schema", "registry", "connection"] {
                        self.expect_keyword(keyword)?;
                    }
                    let (registry, _) = self.name()?;
                    format = SinkFormat::Avro { registry };
                }
                _ => {
                    return Err(
                        self.syntax_error(&[Expected::Keyword("json"), Expected::Keyword("avro")])
                    );
                }
            }
        }
        let mut envelope = SinkEnvelope::Upsert;
        let envelope_given = self.at_word("envelope");
        if envelope_given {
            self.bump();
            match self.word().and_then(SinkEnvelope::parse) {
                Some(e) => {
                    envelope = e;
                    self.bump();
                }
                None => {
                    return Err(self.syntax_error(&[
                        Expected::Keyword("upsert"),
                        Expected::Keyword("debezium"),
                    ]));
                }
            }
        }
        let optional: &[&'static str] = match (format_given, envelope_given) {
            (_, true) => &[],
            (true, false) => &["envelope"],
            (false, false) => &["format", "envelope"],
        };
        if self.at_word("format") || self.at_word("envelope") {
            let at = self.peek().start;
            let word = self.word().unwrap_or_default().to_ascii_uppercase();
            return Err(self
                .error_at(at, format!("conflicting or redundant options near {word}"))
                .with_detail("FORMAT and ENVELOPE are each given at most once, FORMAT first.")
                .with_hint("Write FORMAT ... ENVELOPE ..., once each."));
        }
        self.expect_end(optional)?;
        Ok(Statement::CreateSink(CreateSink {
            name,
            if_not_exists,
            from,
            connection,
            table: QualifiedName::new("", ""),
            kafka: Some(KafkaSink {
                topic,
                format,
                envelope,
            }),
            span: self.span_from(start),
        }))
    }

    /// A Kafka topic name as the broker accepts one: 1 to 249 of ASCII
    /// letters, digits, `.`, `_` and `-`, and not `.` or `..`.
    fn check_topic(&self, topic: &str, at: usize) -> Result<(), ControlError> {
        let valid_chars = topic
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if topic.is_empty() || topic.len() > 249 || !valid_chars || topic == "." || topic == ".." {
            return Err(self
                .error_at(
                    at,
                    format!("invalid topic name {}", super::sql_literal(topic)),
                )
                .with_detail(
                    "Kafka topic names are 1 to 249 ASCII letters, digits, '.', '_' and '-', \
                     and neither '.' nor '..'.",
                )
                .with_hint("Choose a topic name like 'orders' or 'shop.orders-v1'."));
        }
        Ok(())
    }

    /// The sink table's literal, read like PostgreSQL reads `'...'::regclass`:
    /// dot-separated identifiers, unquoted ones folded, white space around
    /// them ignored.
    fn table_literal(&self, value: &str, at: usize) -> Result<QualifiedName, ControlError> {
        let invalid = || {
            self.error_at(at, "invalid name syntax")
                .with_detail(format!(
                    "TABLE {} is not a table name.",
                    super::sql_literal(value)
                ))
                .with_hint(
                    "Write 'schema.table' or 'table'; double-quote a part to keep its case or \
                     special characters, as in 'public.\"Orders\"'.",
                )
        };
        let Some(parts) = split_identifiers(value) else {
            return Err(invalid());
        };
        for part in &parts {
            self.check_length(part, at)?;
        }
        let mut parts = parts.into_iter();
        match (parts.next(), parts.next(), parts.next()) {
            (Some(name), None, _) => Ok(QualifiedName::new("public", name)),
            (Some(schema), Some(name), None) => Ok(QualifiedName::new(schema, name)),
            (Some(a), Some(b), Some(c)) => {
                let mut all = vec![a, b, c];
                all.extend(parts);
                Err(self.error_at(
                    at,
                    format!(
                        "improper qualified name (too many dotted names): {}",
                        all.join(".")
                    ),
                ))
            }
            _ => Err(invalid()),
        }
    }

    fn alter(&mut self, start: usize) -> Result<Statement, ControlError> {
        match self.word() {
            Some("materialized") => {
                self.bump();
                self.expect_keyword("view")?;
                self.alter_view(start)
            }
            Some("source") => {
                self.bump();
                let (source, _) = self.name()?;
                self.expect_keyword("refresh")?;
                self.expect_keyword("references")?;
                self.expect_end(&[])?;
                Ok(Statement::RefreshReferences(RefreshReferences {
                    source,
                    span: self.span_from(start),
                }))
            }
            Some("replica") => {
                self.bump();
                self.alter_replica(start)
            }
            _ => Err(self.statement_error(&["materialized", "source", "replica"])),
        }
    }

    /// After `ALTER MATERIALIZED VIEW`.
    fn alter_view(&mut self, start: usize) -> Result<Statement, ControlError> {
        let (name, _) = self.name()?;
        let absorb = match self.word() {
            Some("apply") => {
                self.bump();
                self.expect_keyword("replacement")?;
                let (replacement, _) = self.name()?;
                let mut wait = None;
                if self.at_word("with") {
                    self.bump();
                    self.options(&[("wait", "WAIT")], |p, _| {
                        wait = Some(p.wait_value()?);
                        Ok(())
                    })?;
                    self.expect_end(&[])?;
                } else {
                    self.expect_end(&["with"])?;
                }
                return Ok(Statement::ApplyReplacement(ApplyReplacement {
                    view: name,
                    replacement,
                    wait,
                    span: self.span_from(start),
                }));
            }
            Some("set") => {
                self.bump();
                let mut absorb = Absorb::default();
                self.options(VIEW_OPTIONS, |p, _| {
                    absorb = p.absorb_value()?;
                    Ok(())
                })?;
                absorb
            }
            Some("reset") => {
                self.bump();
                self.options(VIEW_OPTIONS, |p, _| {
                    let token = p.peek();
                    let value = matches!(token.tok, Tok::Str(_))
                        || (token.tok == Tok::Op && p.raw(token) == "=");
                    if value {
                        return Err(p
                            .error_at(token.start, "RESET must not include values for parameters")
                            .with_hint(
                                "Write RESET (ABSORB), or SET (ABSORB = '...') to set a value.",
                            ));
                    }
                    Ok(())
                })?;
                Absorb::default()
            }
            _ => {
                return Err(self.syntax_error(&[
                    Expected::Keyword("apply"),
                    Expected::Keyword("set"),
                    Expected::Keyword("reset"),
                ]));
            }
        };
        self.expect_end(&[])?;
        Ok(Statement::AlterMaterializedView(AlterMaterializedView {
            name,
            absorb,
            span: self.span_from(start),
        }))
    }

    // ------------------------------------------------------------ replicas

    fn create_replica(&mut self, start: usize) -> Result<Statement, ControlError> {
        let if_not_exists = self.if_not_exists()?;
        let (name, _) = self.name()?;
        self.expect_keyword("from")?;
        self.expect_keyword("source")?;
        let (source, _) = self.name()?;
        self.expect_keyword("into")?;
        self.expect_keyword("postgres")?;
        self.expect_keyword("connection")?;
        let (connection, _) = self.name()?;
        let mut tables = Vec::new();
        let mut copy_data = false;
        let mut enabled = true;
        if self.at_word("with") {
            self.bump();
            self.options(
                &[
                    ("tables", "TABLES"),
                    ("copy", "COPY DATA"),
                    ("enabled", "ENABLED"),
                ],
                |p, keyword| {
                    match keyword {
                        "tables" => tables = p.table_list()?,
                        "enabled" => enabled = p.boolean_value("ENABLED", ENABLED_VALUES)?,
                        _ => {
                            p.expect_keyword("data")?;
                            copy_data = p.boolean_value("COPY DATA", COPY_DATA_VALUES)?;
                        }
                    }
                    Ok(())
                },
            )?;
            self.expect_end(&[])?;
        } else {
            self.expect_end(&["with"])?;
        }
        Ok(Statement::CreateReplica(CreateReplica {
            name,
            if_not_exists,
            source,
            connection,
            tables,
            copy_data,
            enabled,
            span: self.span_from(start),
        }))
    }

    /// `[=] ( schema.table [, ...] )`: at least one table, each once.
    fn table_list(&mut self) -> Result<Vec<QualifiedName>, ControlError> {
        self.optional_equals();
        self.expect_punct('(')?;
        if self.at_punct(')') {
            return Err(self
                .error_at(self.peek().start, "empty table list in TABLES")
                .with_hint(
                    "List at least one table, or leave out TABLES to replicate the tables of \
                     the source's publication.",
                ));
        }
        let mut tables: Vec<QualifiedName> = Vec::new();
        loop {
            let at = self.peek().start;
            let table = self.qualified_name()?;
            if tables.contains(&table) {
                return Err(self
                    .error_at(at, format!("table \"{table}\" specified more than once"))
                    .with_detail("TABLES lists it twice."));
            }
            tables.push(table);
            if !self.comma_or_close()? {
                return Ok(tables);
            }
        }
    }

    /// `[=]` a boolean as PostgreSQL's options take it (`true`, `false`,
    /// `on`, `off`, `yes`, `no`, `1`, `0`, and the prefixes of `true`,
    /// `false`, `yes` and `no`), bare or as a string literal, in any case.
    fn boolean_value(&mut self, option: &str, values: &str) -> Result<bool, ControlError> {
        self.optional_equals();
        let token = self.peek().clone();
        let value = match &token.tok {
            Tok::Word(w) => w.clone(),
            Tok::Str(s) => s.trim().to_ascii_lowercase(),
            Tok::Number => self.raw(&token).to_string(),
            _ => {
                let err = self.bare_syntax_error();
                return Err(if token.tok == Tok::Error {
                    err
                } else {
                    err.with_hint(values.to_owned())
                });
            }
        };
        let prefix_of = |word: &str| !value.is_empty() && word.starts_with(value.as_str());
        let yes = match value.as_str() {
            "on" | "1" => true,
            "off" | "0" => false,
            _ if prefix_of("true") || prefix_of("yes") => true,
            _ if prefix_of("false") || prefix_of("no") => false,
            _ => {
                return Err(self
                    .error_at(
                        token.start,
                        format!("invalid value for option {option}: {}", near(&value)),
                    )
                    .with_hint(values.to_owned()));
            }
        };
        self.bump();
        Ok(yes)
    }

    /// After `ALTER REPLICA`.
    fn alter_replica(&mut self, start: usize) -> Result<Statement, ControlError> {
        let (name, _) = self.name()?;
        let set = match self.word() {
            Some("set") => true,
            Some("reset") => false,
            Some(w @ ("enable" | "disable")) => {
                let enabled = w == "enable";
                self.bump();
                self.expect_end(&[])?;
                return Ok(Statement::EnableReplica(EnableReplica {
                    name,
                    enabled,
                    span: self.span_from(start),
                }));
            }
            _ => {
                return Err(self.syntax_error(&[
                    Expected::Keyword("set"),
                    Expected::Keyword("reset"),
                    Expected::Keyword("enable"),
                    Expected::Keyword("disable"),
                ]));
            }
        };
        self.bump();
        self.expect_keyword("conflict")?;
        self.expect_keyword("resolver")?;
        let conflict = self.conflict_type()?;
        let resolver = if set {
            if !(self.peek().tok == Tok::Op && self.raw(self.peek()) == "=") {
                return Err(self.syntax_error(&[Expected::Punct('=')]));
            }
            self.bump();
            Some(self.resolver(conflict)?)
        } else {
            let token = self.peek();
            if token.tok == Tok::Op && self.raw(token) == "=" {
                return Err(self
                    .error_at(token.start, "RESET must not include a value")
                    .with_hint(format!(
                        "Write RESET CONFLICT RESOLVER {conflict}, or SET CONFLICT RESOLVER \
                         {conflict} = '...' to set one."
                    )));
            }
            None
        };
        self.expect_end(&[])?;
        Ok(Statement::AlterReplica(AlterReplica {
            name,
            conflict,
            resolver,
            span: self.span_from(start),
        }))
    }

    /// A conflict type's name, checked against [`ConflictType::all`].
    fn conflict_type(&mut self) -> Result<ConflictType, ControlError> {
        let token = self.peek().clone();
        let name = match &token.tok {
            Tok::Word(w) | Tok::Quoted(w) => w.clone(),
            _ => return Err(self.syntax_error(&[Expected::Name])),
        };
        let conflict =
            ConflictType::parse(&name).map_err(|e| self.conflict_error(token.start, &e))?;
        self.bump();
        Ok(conflict)
    }

    /// A resolver, a string literal or a bare word, that `conflict`
    /// allows.
    fn resolver(&mut self, conflict: ConflictType) -> Result<Resolver, ControlError> {
        let token = self.peek().clone();
        let name = match &token.tok {
            Tok::Str(s) | Tok::Word(s) | Tok::Quoted(s) => s.clone(),
            _ => return Err(self.syntax_error(&[Expected::Literal])),
        };
        let resolver = Resolver::parse(&name).map_err(|e| self.conflict_error(token.start, &e))?;
        if !conflict.allowed().contains(&resolver) {
            let e = ConflictError::NotAllowed { conflict, resolver };
            return Err(self.conflict_error(token.start, &e));
        }
        self.bump();
        Ok(resolver)
    }

    fn conflict_error(&self, at: usize, e: &ConflictError) -> ControlError {
        self.error_at(at, e.to_string()).with_sqlstate("22023")
    }

    fn create_transform(&mut self, start: usize) -> Result<Statement, ControlError> {
        let if_not_exists = self.if_not_exists()?;
        let (name, _) = self.name()?;
        self.expect_keyword("on")?;
        self.expect_keyword("replica")?;
        let (replica, _) = self.name()?;
        self.expect_keyword("for")?;
        self.expect_keyword("table")?;
        let table = self.qualified_name()?;
        self.expect_keyword("set")?;
        let mut sets: Vec<(String, String)> = Vec::new();
        let filter = loop {
            let (column, span) = self.name()?;
            if sets.iter().any(|(c, _)| *c == column) {
                return Err(self
                    .error_at(
                        span.start,
                        format!("column \"{column}\" specified more than once"),
                    )
                    .with_detail("SET assigns it twice."));
            }
            // `a=-1`: the lexer reads `=-` as one operator, PostgreSQL's
            // as `=` and a sign.
            let token = self.peek().clone();
            let raw = self.raw(&token);
            let signed = raw.len() > 1
                && raw.starts_with('=')
                && raw[1..].bytes().all(|b| b == b'+' || b == b'-');
            if !(token.tok == Tok::Op && (raw == "=" || signed)) {
                return Err(self.syntax_error(&[Expected::Punct('=')]));
            }
            let expression = if signed {
                self.sql_text_from(token.start + 1, true)?
            } else {
                self.bump();
                self.sql_text(true)?
            };
            sets.push((column, expression));
            if self.at_punct(',') {
                self.bump();
                continue;
            }
            if self.at_word("where") {
                self.bump();
                break Some(self.sql_text(false)?);
            }
            break None;
        };
        self.expect_end(&[])?;
        Ok(Statement::CreateTransform(CreateTransform {
            name,
            if_not_exists,
            replica,
            table,
            sets,
            filter,
            span: self.span_from(start),
        }))
    }

    /// SQL text kept verbatim, from the current token to the end of the
    /// statement, or (`in_list`) to a comma or `WHERE` outside
    /// parentheses and brackets; those must balance. Not empty.
    fn sql_text(&mut self, in_list: bool) -> Result<String, ControlError> {
        let start = self.peek().start;
        self.sql_text_from(start, in_list)
    }

    /// [`Self::sql_text`] from byte `start`, inside or at the start of the
    /// current token.
    fn sql_text_from(&mut self, start: usize, in_list: bool) -> Result<String, ControlError> {
        let mut open: Vec<char> = Vec::new();
        let mut end = start;
        let mut previous: Option<Tok> = None;
        loop {
            let token = self.peek().clone();
            let depth0 = open.is_empty();
            match &token.tok {
                Tok::Error => return Err(self.lex_error()),
                Tok::Eof | Tok::Punct(';') => break,
                Tok::Punct(',') if depth0 && in_list => break,
                Tok::Word(w) if depth0 && in_list && w == "where" => break,
                Tok::Word(w)
                    if depth0
                        && STATEMENT_STARTS.contains(&w.as_str())
                        && previous != Some(Tok::Punct('.'))
                        && matches!(self.peek_nth(1).tok, Tok::Word(_)) =>
                {
                    return Err(self.missing_semicolon());
                }
                Tok::Punct(c @ ('(' | '[')) => open.push(*c),
                Tok::Punct(c @ (')' | ']')) => {
                    let matching = if *c == ')' { '(' } else { '[' };
                    match open.pop() {
                        Some(o) if o == matching => {}
                        _ => {
                            return Err(self
                                .bare_syntax_error()
                                .with_hint(format!("\"{c}\" closes nothing here.")));
                        }
                    }
                }
                Tok::Other if self.raw(&token) == "$" => {
                    return Err(self
                        .error_at(
                            token.start,
                            "dollar quoting and parameters are not supported in transforms",
                        )
                        .with_hint("Write strings as standard literals: 'it''s'."));
                }
                Tok::Str(_)
                    if matches!(&previous, Some(Tok::Word(w)) if w == "e")
                        && token.start == end =>
                {
                    return Err(self
                        .error_at(
                            token.start - 1,
                            "escape string constants (E'...') are not supported in transforms",
                        )
                        .with_hint(
                            "Write a standard literal, with chr() for special characters: \
                             'a' || chr(10) || 'b'.",
                        ));
                }
                _ => {}
            }
            end = token.end;
            previous = Some(token.tok.clone());
            self.bump();
        }
        if let Some(c) = open.last() {
            let close = if *c == '(' { ')' } else { ']' };
            return Err(self
                .bare_syntax_error()
                .with_hint(format!("Expected \"{close}\": a \"{c}\" is not closed.")));
        }
        if end == start {
            return Err(self.syntax_error(&[Expected::Expression]));
        }
        Ok(self.input[start..end].to_string())
    }

    fn drop(&mut self, start: usize) -> Result<Statement, ControlError> {
        let kind = match self.word() {
            Some("source") => ObjectKind::Source,
            Some("table") => ObjectKind::Table,
            Some("sink") => ObjectKind::Sink,
            Some("replica") => ObjectKind::Replica,
            Some("transform") => ObjectKind::Transform,
            Some("materialized") => {
                self.bump();
                self.expect_keyword("view")?;
                return self.drop_object(start, ObjectKind::MaterializedView);
            }
            _ => {
                return Err(self.statement_error(&[
                    "source",
                    "table",
                    "materialized",
                    "sink",
                    "replica",
                    "transform",
                ]));
            }
        };
        self.bump();
        self.drop_object(start, kind)
    }

    fn drop_object(&mut self, start: usize, kind: ObjectKind) -> Result<Statement, ControlError> {
        // `if` is a name unless another name-like token follows it.
        let if_exists =
            self.at_word("if") && matches!(self.peek_nth(1).tok, Tok::Word(_) | Tok::Quoted(_));
        if if_exists {
            self.bump();
            self.expect_keyword("exists")?;
        }
        let (name, _) = self.name()?;
        self.expect_end(&[])?;
        Ok(Statement::Drop(Drop {
            kind,
            name,
            if_exists,
            span: self.span_from(start),
        }))
    }

    fn show(&mut self, start: usize) -> Result<Statement, ControlError> {
        let kind = match self.word() {
            Some("sources") => ObjectKind::Source,
            Some("tables") => ObjectKind::Table,
            Some("sinks") => ObjectKind::Sink,
            Some("replicas") => ObjectKind::Replica,
            Some("transforms") => ObjectKind::Transform,
            Some("materialized") => {
                self.bump();
                self.expect_keyword("views")?;
                return self.show_end(start, ObjectKind::MaterializedView);
            }
            Some("conflict") => {
                self.bump();
                self.expect_keyword("resolvers")?;
                self.expect_keyword("for")?;
                self.expect_keyword("replica")?;
                let (replica, _) = self.name()?;
                self.expect_end(&[])?;
                return Ok(Statement::ShowConflictResolvers(ShowConflictResolvers {
                    replica,
                    span: self.span_from(start),
                }));
            }
            _ => {
                return Err(self.statement_error(&[
                    "sources",
                    "tables",
                    "materialized",
                    "sinks",
                    "replicas",
                    "transforms",
                    "conflict",
                ]));
            }
        };
        self.bump();
        self.show_end(start, kind)
    }

    fn show_end(&mut self, start: usize, kind: ObjectKind) -> Result<Statement, ControlError> {
        self.expect_end(&[])?;
        Ok(Statement::Show(Show {
            kind,
            span: self.span_from(start),
        }))
    }
}

/// The interface query of `CREATE [REPLACEMENT] MATERIALIZED VIEW ... AS`,
/// matched token by token against its one accepted form.
struct Interface<'p, 'a> {
    parser: &'p mut Parser<'a>,
    replacement: bool,
}

impl Interface<'_, '_> {
    /// Matches the query up to the end of the statement; returns the table.
    fn query(&mut self) -> Result<String, ControlError> {
        self.word("select")?;
        self.word("coalesce")?;
        self.punct('(')?;
        self.word("jsonb_strip_nulls")?;
        self.punct('(')?;
        self.word("to_jsonb")?;
        self.punct('(')?;
        let row_at = self.parser.peek().start;
        let row = self.name("the table's alias")?;
        self.punct(')')?;
        self.punct(')')?;
        self.punct(',')?;
        if self.parser.at_word("cast") {
            self.parser.bump();
            self.punct('(')?;
            self.empty_object()?;
            self.word("as")?;
            self.jsonb()?;
            self.punct(')')?;
        } else {
            self.empty_object()?;
            if self.parser.peek().tok == Tok::Cast {
                self.parser.bump();
                self.jsonb()?;
            }
        }
        self.punct(')')?;
        if self.parser.at_word("as") {
            self.parser.bump();
        }
        match &self.parser.peek().tok {
            Tok::Word(w) | Tok::Quoted(w) if w == "data" => self.parser.bump(),
            _ => return Err(self.mismatch("data")),
        }
        self.word("from")?;
        let table = self.name("a table name")?;
        let alias = if self.parser.at_word("as") {
            self.parser.bump();
            Some(self.name("an alias")?)
        } else {
            match &self.parser.peek().tok {
                Tok::Quoted(_) => Some(self.name("an alias")?),
                Tok::Word(w) if !is_reserved(w) && !STATEMENT_STARTS.contains(&w.as_str()) => {
                    Some(self.name("an alias")?)
                }
                _ => None,
            }
        };
        if !self.parser.at_end() {
            let p = &*self.parser;
            if p.peek().tok == Tok::Error {
                return Err(p.lex_error());
            }
            if p.word().is_some_and(|w| STATEMENT_STARTS.contains(&w)) {
                return Err(p.missing_semicolon());
            }
            return Err(self.error(
                p.peek().start,
                format!(
                    "Found {} after the end of the interface form.",
                    near(p.raw(p.peek()))
                ),
            ));
        }
        let alias = alias.as_ref().unwrap_or(&table);
        if row != *alias {
            return Err(self.error(
                row_at,
                format!(
                    "to_jsonb({}) does not take the row of the table in FROM; write to_jsonb({}).",
                    super::sql_ident(&row),
                    super::sql_ident(alias)
                ),
            ));
        }
        Ok(table)
    }

    fn error(&self, at: usize, detail: String) -> ControlError {
        let form = if self.replacement {
            format!(
                "CREATE REPLACEMENT MATERIALIZED VIEW view_name FOR target_view AS {INTERFACE_FORM}"
            )
        } else {
            format!("CREATE MATERIALIZED VIEW view_name AS {INTERFACE_FORM}")
        };
        self.parser
            .error_at(at, "unsupported materialized view definition")
            .with_detail(detail)
            .with_hint(format!("The only accepted form is: {form}"))
    }

    /// The error for the current token where the form has `expected`; the
    /// lexer's error when the lexer stopped here.
    fn mismatch(&self, expected: &str) -> ControlError {
        let p = &*self.parser;
        let token = p.peek();
        let found = match token.tok {
            Tok::Error => return p.lex_error(),
            Tok::Eof => "the end of the input".to_owned(),
            _ => near(p.raw(token)),
        };
        self.error(
            token.start,
            format!("Found {found} where the interface form has {expected}."),
        )
    }

    fn word(&mut self, word: &str) -> Result<(), ControlError> {
        if self.parser.at_word(word) {
            self.parser.bump();
            Ok(())
        } else {
            Err(self.mismatch(word))
        }
    }

    fn punct(&mut self, c: char) -> Result<(), ControlError> {
        if self.parser.at_punct(c) {
            self.parser.bump();
            Ok(())
        } else {
            Err(self.mismatch(&format!("\"{c}\"")))
        }
    }

    fn empty_object(&mut self) -> Result<(), ControlError> {
        if matches!(&self.parser.peek().tok, Tok::Str(s) if s == "{}") {
            self.parser.bump();
            Ok(())
        } else {
            Err(self.mismatch("'{}'"))
        }
    }

    fn jsonb(&mut self) -> Result<(), ControlError> {
        match &self.parser.peek().tok {
            Tok::Word(w) | Tok::Quoted(w) if w == "jsonb" => {
                self.parser.bump();
                Ok(())
            }
            _ => Err(self.mismatch("jsonb")),
        }
    }

    fn name(&mut self, what: &str) -> Result<String, ControlError> {
        let token = self.parser.peek().clone();
        match token.tok {
            Tok::Word(w) if !is_reserved(&w) => {
                self.parser.check_length(&w, token.start)?;
                self.parser.bump();
                Ok(w)
            }
            Tok::Quoted(q) => {
                self.parser.check_length(&q, token.start)?;
                self.parser.bump();
                Ok(q)
            }
            _ => Err(self.mismatch(what)),
        }
    }
}

/// PostgreSQL's `SplitIdentifierString` with `.`: the identifiers of
/// `'schema.table'`, or `None` when it is not a dotted list of identifiers.
fn split_identifiers(value: &str) -> Option<Vec<String>> {
    let is_space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c');
    let mut parts = Vec::new();
    let mut rest = value.trim_start_matches(is_space);
    loop {
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut part = String::new();
            let mut chars = quoted.char_indices();
            let after = loop {
                match chars.next()? {
                    (i, '"') => {
                        if quoted[i + 1..].starts_with('"') {
                            part.push('"');
                            chars.next();
                        } else {
                            break &quoted[i + 1..];
                        }
                    }
                    (_, c) => part.push(c),
                }
            };
            if part.is_empty() {
                return None;
            }
            parts.push(part);
            rest = after;
        } else {
            let end = rest
                .find(|c: char| c == '.' || is_space(c))
                .unwrap_or(rest.len());
            if end == 0 {
                return None;
            }
            parts.push(rest[..end].to_ascii_lowercase());
            rest = &rest[end..];
        }
        rest = rest.trim_start_matches(is_space);
        match rest.strip_prefix('.') {
            Some(after) => rest = after.trim_start_matches(is_space),
            None if rest.is_empty() => return Some(parts),
            None => return None,
        }
    }
}

/// `a, b or c`
fn list(expected: &[Expected]) -> String {
    let items: Vec<String> = expected.iter().map(|e| e.describe()).collect();
    match items.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, init)) => format!("{} or {last}", init.join(", ")),
    }
}
