//! Any bytes through the statement splitter, the lexer and the parser: each returns a value or
//! an error; no panic, no stack overflow, no hang. A statement that parses has a byte range
//! inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(sql) = std::str::from_utf8(data) else {
        return;
    };
    for (at, text) in ember_sql::split_statements(sql) {
        assert!(
            at + text.len() <= sql.len(),
            "statement range inside the input"
        );
    }
    let _ = ember_sql::parse_expr(sql);
    match ember_sql::parse(sql) {
        Ok(stmts) => {
            for p in stmts {
                assert!(p.sql.len() <= sql.len(), "statement text inside the input");
            }
        }
        Err(e) => {
            // Every error can be shown.
            let _ = e.to_string();
        }
    }
});
