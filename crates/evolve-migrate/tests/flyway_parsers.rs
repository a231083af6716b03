//! The Flyway configuration, naming and placeholder parsers never panic,
//! whatever they are given, and replacement leaves text without
//! placeholders alone.

use evolve_migrate::{
    BuiltIns, FlywayConfig, Named, Naming, Placeholders, from_env, parse_conf, parse_toml,
};
use proptest::prelude::*;

proptest! {
    #[test]
    fn conf_and_toml_never_panic(text in "(?s)[a-z.=:#!\\\\\\[\\]\"{}, \n\r\tA-Z0-9_-]{0,200}") {
        let _ = FlywayConfig::from_pairs(&parse_conf(&text));
        if let Ok(pairs) = parse_toml(&text) {
            let _ = FlywayConfig::from_pairs(&pairs);
        }
    }

    #[test]
    fn any_text_parses_without_panic(text in any::<String>()) {
        let _ = parse_conf(&text);
        let _ = parse_toml(&text);
    }

    #[test]
    fn environment_never_panics(vars in proptest::collection::vec(("FLYWAY_[A-Z_]{0,20}", any::<String>()), 0..8)) {
        let pairs = from_env(vars);
        let _ = FlywayConfig::from_pairs(&pairs);
    }

    #[test]
    fn placeholders_never_panic(
        text in any::<String>(),
        prefix in "\\PC{0,3}",
        suffix in "\\PC{0,3}",
        name in "\\PC{0,5}",
        value in "\\PC{0,5}",
    ) {
        let p = Placeholders {
            prefix,
            suffix,
            values: [(name, value)].into(),
            ..Placeholders::default()
        };
        let _ = p.replace(&text, &BuiltIns::default(), "V1__a.sql");
    }

    #[test]
    fn callback_names_never_panic_and_are_never_migrations(
        name in "\\PC{0,30}",
        event in proptest::sample::select(evolve_core::migration::CALLBACK_EVENTS.to_vec()),
        description in "[a-zA-Z0-9_ ]{0,10}",
    ) {
        let _ = evolve_core::migration::parse_callback_name(&name);
        let file = format!("{event}__{description}.sql");
        let parsed = evolve_core::migration::parse_callback_name(&file);
        prop_assert_eq!(parsed.map(|c| c.event), Some(event));
        prop_assert_eq!(evolve_core::migration::parse_file_name(&file), Ok(None));
    }

    #[test]
    fn any_naming_parses_any_name_without_panic(
        name in "\\PC{0,30}",
        versioned_prefix in "\\PC{1,3}",
        repeatable_prefix in "\\PC{1,3}",
        separator in "\\PC{1,3}",
        suffixes in proptest::collection::vec("\\PC{1,5}", 1..3),
        version in "[0-9]{1,3}(\\.[0-9]{1,3})?",
        description in "[a-z_]{0,10}",
    ) {
        let naming = Naming {
            versioned_prefix,
            repeatable_prefix,
            baseline_prefix: "B".into(),
            separator,
            suffixes,
        };
        let _ = naming.parse(&name);
        let _ = naming.is_candidate(name.as_bytes());
        // The name `migrate new` gives is read back as that version, unless
        // a longer prefix (a callback event) claims it.
        let file = naming.versioned_file_name(&version, &description);
        if let Ok(Some(Named::Migration(m))) = naming.parse(&file) {
            prop_assert_eq!(m.script, file);
        }
    }

    #[test]
    fn text_without_the_prefix_is_left_alone(text in "[^$]*") {
        let p = Placeholders::default();
        prop_assert_eq!(p.replace(&text, &BuiltIns::default(), "f"), Ok(text.clone()));
    }
}
