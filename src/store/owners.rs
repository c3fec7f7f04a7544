//! Who owns what in the store. One SQLite file holds several repositories, each the only writer
//! of its tables and the author of its own section of the migrations; `store_meta` is the
//! store's own key-value table, where each repository keeps its keys (the search index's
//! version, the fleet spool's cursors, the audit chain's anchor). The fleet spool owns no
//! table: it reads what the audit and catalog repositories wrote and keeps its cursors.
//! Each repository is a type, reached from the store by its accessor (`store.generations()`),
//! implemented in its own files only; `Store` itself keeps opening, health and the accessors.
//! The test below holds the map to the migrations and to the code.

/// One repository: its type and the store's accessor of it, its files in `src/store/`, its
/// tables, and its migrations.
pub(crate) struct Owner {
    pub name: &'static str,
    pub repository: &'static str,
    pub accessor: &'static str,
    pub files: &'static [&'static str],
    pub tables: &'static [&'static str],
    pub migrations: &'static [&'static str],
}

pub(crate) const OWNERS: &[Owner] = &[
    Owner {
        name: "catalog generations",
        repository: "Generations",
        accessor: "generations",
        files: &["generations.rs", "definitions.rs", "search.rs", "snapshot.rs"],
        tables: &[
            "servers",
            "generations",
            "tool_versions",
            "definitions",
            "enumerations",
            "current_snapshots",
            "search_rows",
            "tool_search",
        ],
        migrations: &["0001_catalog", "0002_era", "0004_search", "0006_private_listings", "0007_current_snapshot"],
    },
    Owner {
        name: "definition approvals",
        repository: "Approvals",
        accessor: "approvals",
        files: &["approvals.rs"],
        tables: &["approvals"],
        migrations: &["0005_integrity"],
    },
    Owner {
        name: "audit trail",
        repository: "Audit",
        accessor: "audit",
        files: &["audit.rs", "audit_chain.rs"],
        tables: &["audit", "audit_checkpoints"],
        migrations: &["0003_audit", "0011_audit_chain", "0012_audit_anchor"],
    },
    Owner {
        name: "quotas",
        repository: "Quotas",
        accessor: "quotas",
        files: &["quotas.rs"],
        tables: &["quota_usage"],
        migrations: &["0008_quotas"],
    },
    Owner {
        name: "tasks",
        repository: "Tasks",
        accessor: "tasks",
        files: &["tasks.rs"],
        tables: &["tasks"],
        migrations: &["0009_tasks", "0013_task_stages"],
    },
    Owner {
        name: "call approvals",
        repository: "CallApprovals",
        accessor: "call_approvals",
        files: &["call_approvals.rs"],
        tables: &["call_approvals"],
        migrations: &["0010_call_approvals"],
    },
    Owner { name: "fleet spool", repository: "Spool", accessor: "fleet", files: &["fleet.rs"], tables: &[], migrations: &[] },
];

/// The store's own files: opening, health (`degraded`), the one write path (`writer`).
pub(crate) const STORE_FILES: &[&str] = &["mod.rs", "degraded.rs", "writer.rs"];

/// What `Store` itself may offer beside the accessors: opening, health, closing.
pub(crate) const STORE_METHODS: &[&str] = &["open", "open_without_search_index", "degraded", "watch_degraded", "close"];

/// The store's own table, shared by key.
pub(crate) const SHARED: &str = "store_meta";

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;

    fn words_after<'a>(text: &'a str, keyword: &str) -> Vec<&'a str> {
        text.match_indices(keyword)
            .filter_map(|(at, _)| text[at + keyword.len()..].split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next())
            .filter(|word| !word.is_empty() && *word != "IF")
            .collect()
    }

    #[test]
    fn every_table_and_migration_has_one_owner_and_only_the_owner_writes_its_tables() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut migrations: Vec<_> = std::fs::read_dir(root.join("migrations"))
            .unwrap()
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
            .collect();
        migrations.sort();
        let owner_of_migration: BTreeMap<&str, &str> =
            OWNERS.iter().flat_map(|owner| owner.migrations.iter().map(|migration| (*migration, owner.name))).collect();
        let owner_of_table: BTreeMap<&str, &str> =
            OWNERS.iter().flat_map(|owner| owner.tables.iter().map(|table| (*table, owner.name))).collect();
        assert_eq!(owner_of_migration.len(), OWNERS.iter().map(|owner| owner.migrations.len()).sum::<usize>(), "a migration listed twice");
        assert_eq!(owner_of_table.len(), OWNERS.iter().map(|owner| owner.tables.len()).sum::<usize>(), "a table listed twice");
        for path in &migrations {
            let stem = path.file_stem().unwrap().to_str().unwrap();
            let owner = owner_of_migration.get(stem).unwrap_or_else(|| panic!("migration {stem} has no owner in OWNERS"));
            let sql = std::fs::read_to_string(path).unwrap();
            for table in words_after(&sql, "CREATE TABLE ").into_iter().chain(words_after(&sql, "CREATE VIRTUAL TABLE ")) {
                if table == SHARED {
                    continue;
                }
                assert_eq!(owner_of_table.get(table), Some(owner), "{stem} creates {table}, which its owner {owner} does not list");
            }
        }
        assert_eq!(owner_of_migration.len(), migrations.len(), "OWNERS lists a migration that does not exist");
        // Only the owner's files write its tables.
        let store = root.join("src/store");
        for entry in std::fs::read_dir(&store).unwrap() {
            let path = entry.unwrap().path();
            let file = path.file_name().unwrap().to_str().unwrap().to_owned();
            let code = std::fs::read_to_string(&path).unwrap();
            let written = ["INSERT INTO ", "INSERT OR REPLACE INTO ", "UPDATE ", "DELETE FROM "]
                .into_iter()
                .flat_map(|verb| words_after(&code, verb));
            for table in written {
                let Some(owner) = owner_of_table.get(table) else { continue };
                let files = OWNERS.iter().find(|candidate| candidate.name == *owner).unwrap().files;
                assert!(files.contains(&file.as_str()), "{file} writes {table}, which belongs to {owner} ({files:?})");
            }
        }
    }

    /// The name of the type an `impl` line implements (`impl<'a> Tasks<'a> {` → `Tasks`), if it
    /// is an inherent `impl` at the start of a line.
    fn implemented(line: &str) -> Option<&str> {
        let mut rest = line.strip_prefix("impl")?;
        if let Some(generic) = rest.strip_prefix('<') {
            rest = &generic[generic.find('>')? + 1..];
        }
        let rest = rest.strip_prefix(' ')?;
        let name = rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next()?;
        (!rest.contains(" for ") && !name.is_empty()).then_some(name)
    }

    #[test]
    fn each_repository_is_a_type_implemented_in_its_own_files_and_the_store_only_opens_and_hands_them_out() {
        let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
        let owner_of_type: BTreeMap<&str, &Owner> = OWNERS.iter().map(|owner| (owner.repository, owner)).collect();
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        let mut store_methods = Vec::new();
        for entry in std::fs::read_dir(&store).unwrap() {
            let path = entry.unwrap().path();
            let file = path.file_name().unwrap().to_str().unwrap().to_owned();
            let code = std::fs::read_to_string(&path).unwrap();
            let mut in_store_impl = false;
            for line in code.lines() {
                if let Some(name) = implemented(line) {
                    in_store_impl = name == "Store";
                    if in_store_impl {
                        assert!(STORE_FILES.contains(&file.as_str()), "{file} adds methods to Store: a repository's belong to its type");
                    } else if let Some(owner) = owner_of_type.get(name) {
                        assert!(owner.files.contains(&file.as_str()), "{file} implements {name}, whose files are {:?}", owner.files);
                        *seen.entry(owner.repository).or_default() += 1;
                    }
                } else if line.starts_with('}') {
                    in_store_impl = false;
                } else if in_store_impl && let Some(signature) = line.trim_start().strip_prefix("pub ") {
                    let signature = signature.trim_start_matches("async ");
                    if let Some(name) = signature.strip_prefix("fn ").and_then(|rest| rest.split('(').next()) {
                        store_methods.push(name.to_owned());
                    }
                }
            }
        }
        for owner in OWNERS {
            assert!(seen.contains_key(owner.repository), "{} ({}) is not implemented in its files", owner.repository, owner.name);
        }
        // Store's public methods: opening, health, closing, and one accessor per repository.
        assert!(store_methods.iter().any(|method| method == "open"), "Store's own methods were not found (found {store_methods:?})");
        let accessors: Vec<&str> = OWNERS.iter().map(|owner| owner.accessor).collect();
        for method in &store_methods {
            assert!(
                STORE_METHODS.contains(&method.as_str()) || accessors.contains(&method.as_str()),
                "Store::{method} is neither opening, health nor an accessor: it belongs to a repository"
            );
        }
        let mod_rs = std::fs::read_to_string(store.join("mod.rs")).unwrap();
        for owner in OWNERS {
            let accessor = format!("pub fn {}(&self) -> {}<'_>", owner.accessor, owner.repository);
            assert!(mod_rs.contains(&accessor), "mod.rs lacks `{accessor}`");
        }
    }
}
