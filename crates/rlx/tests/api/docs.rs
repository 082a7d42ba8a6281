//! docs/graph-format.md's op table is what the loader reads: the table once named
//! `dequant_matmul` where documents say `dequant_mat_mul`.

/// Every complete JSON example in the op table's JSON column deserializes as an op
/// (examples with placeholders such as `[...]` are not JSON and are skipped; at least
/// 20 are checked, so a reformatted table cannot pass by checking nothing).
#[test]
fn every_json_example_of_the_op_table_is_an_op() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/graph-format.md")).unwrap();
    let table = &doc[doc.find("| op | JSON |").expect("the op table")..];
    let mut checked = 0;
    for row in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
        let json_column = row.split('|').nth(2).unwrap_or_default();
        for (i, fragment) in json_column.split('`').enumerate() {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(fragment) else { continue };
            if i % 2 == 0 || !(value.is_object() || value.is_string()) {
                continue; // outside backticks, or a bare word such as a list of names
            }
            if let Some(name) = value.as_str()
                && !row.contains(&format!("`\"{name}\"`"))
            {
                continue;
            }
            if let Err(e) = serde_json::from_value::<rlx::ir::Op>(value.clone()) {
                panic!("docs/graph-format.md: {fragment} is not an op: {e}\n  row: {row}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} examples checked");
}
