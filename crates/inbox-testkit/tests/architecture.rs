//! ARCHITECTURE.md's crate map is Cargo's: the edges between workspace crates that its
//! `crate-map` block (normal dependencies) and `crate-map-dev` block (dev-dependencies that are
//! not also normal ones) state are exactly those `cargo metadata` reports, both ways. The
//! document is the one copy of the map; this test only reads it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Each crate with the workspace crates it depends on.
type CrateMap = BTreeMap<String, BTreeSet<String>>;

#[test]
fn architecture_md_crate_map_is_cargos() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = root.join("ARCHITECTURE.md");
    let document =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let cargo = cargo_maps(&root);
    let mut differences =
        compare(Block::Normal, &block(&document, Block::Normal), &cargo.normal, &cargo.members);
    differences.extend(compare(Block::Dev, &block(&document, Block::Dev), &cargo.dev, &cargo.members));
    assert!(
        differences.is_empty(),
        "ARCHITECTURE.md's crate map and Cargo.toml (cargo metadata) disagree:\n  {}\n\
         change the map in ARCHITECTURE.md, or the Cargo.toml, so they agree",
        differences.join("\n  ")
    );
}

/// The two blocks of the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    /// Normal dependencies: every workspace crate has a line, `name ->` when it has none.
    Normal,
    /// Dev-only edges: a crate without a line has none.
    Dev,
}

impl Block {
    fn tag(self) -> &'static str {
        match self {
            Block::Normal => "crate-map",
            Block::Dev => "crate-map-dev",
        }
    }
}

/// What Cargo says: the workspace's crates and the edges between them.
struct CargoMaps {
    members: BTreeSet<String>,
    normal: CrateMap,
    dev: CrateMap,
}

fn cargo_maps(root: &Path) -> CargoMaps {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(root)
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let ids: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .expect("cargo metadata lists workspace_members")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let packages: Vec<&Value> = metadata["packages"]
        .as_array()
        .expect("cargo metadata lists packages")
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| ids.contains(id)))
        .collect();
    let name_of =
        |value: &Value| value["name"].as_str().expect("every package and dependency has a name").to_owned();
    let members: BTreeSet<String> = packages.iter().map(|p| name_of(p)).collect();
    let mut normal = CrateMap::new();
    let mut dev = CrateMap::new();
    for package in packages {
        let mut normal_deps = BTreeSet::new();
        let mut dev_deps = BTreeSet::new();
        for dependency in package["dependencies"].as_array().expect("a package lists its dependencies") {
            let name = name_of(dependency);
            if !members.contains(&name) {
                continue;
            }
            match dependency["kind"].as_str() {
                None => {
                    normal_deps.insert(name);
                }
                Some("dev") => {
                    dev_deps.insert(name);
                }
                Some(_) => {}
            }
        }
        let dev_only: BTreeSet<String> = dev_deps.difference(&normal_deps).cloned().collect();
        if !dev_only.is_empty() {
            dev.insert(name_of(package), dev_only);
        }
        normal.insert(name_of(package), normal_deps);
    }
    CargoMaps { members, normal, dev }
}

/// The map in the document's fenced block opened by "```" and the block's tag: one line per
/// crate, `name -> dependency, dependency`.
fn block(document: &str, which: Block) -> CrateMap {
    let opening = format!("```{}", which.tag());
    let mut lines = document.lines().skip_while(|line| line.trim() != opening);
    assert!(lines.next().is_some(), "ARCHITECTURE.md has no block opened by {opening}");
    let mut map = CrateMap::new();
    let mut closed = false;
    for line in lines {
        let line = line.trim();
        if line.starts_with("```") {
            closed = true;
            break;
        }
        if line.is_empty() {
            continue;
        }
        let (name, dependencies) = line
            .split_once("->")
            .unwrap_or_else(|| panic!("{opening}: {line:?} is not `crate -> dependency, ...`"));
        let dependencies =
            dependencies.split(',').map(str::trim).filter(|d| !d.is_empty()).map(str::to_owned);
        let previous = map.insert(name.trim().to_owned(), dependencies.collect());
        assert!(previous.is_none(), "{opening}: {} has two lines", name.trim());
    }
    assert!(closed, "ARCHITECTURE.md's {opening} block is not closed by ```");
    map
}

/// Every way `document` and `cargo` differ, one sentence each naming the crate.
fn compare(which: Block, document: &CrateMap, cargo: &CrateMap, members: &BTreeSet<String>) -> Vec<String> {
    let tag = which.tag();
    let none = BTreeSet::new();
    let mut differences = Vec::new();
    for name in document.keys().filter(|name| !members.contains(*name)) {
        differences.push(format!("{name}: has a line in the {tag} block but is not a workspace crate"));
    }
    for name in members {
        let stated = document.get(name);
        let actual = cargo.get(name).unwrap_or(&none);
        if stated.is_none() && which == Block::Normal {
            differences.push(format!("{name}: a workspace crate with no line in the {tag} block"));
            continue;
        }
        let stated = stated.unwrap_or(&none);
        for missing in actual.difference(stated) {
            differences.push(format!("{name} -> {missing}: in Cargo.toml, missing from the {tag} block"));
        }
        for extra in stated.difference(actual) {
            differences.push(format!("{name} -> {extra}: in the {tag} block, not in Cargo.toml"));
        }
    }
    differences
}

/// The comparison and the reading themselves, on small maps.
mod comparing {
    use super::*;

    fn map(lines: &[(&str, &[&str])]) -> CrateMap {
        lines
            .iter()
            .map(|(name, deps)| ((*name).to_owned(), deps.iter().map(|d| (*d).to_owned()).collect()))
            .collect()
    }

    fn members() -> BTreeSet<String> {
        ["a", "b", "c"].into_iter().map(str::to_owned).collect()
    }

    #[test]
    fn agreeing_maps_differ_in_nothing() {
        let cargo = map(&[("a", &["b"]), ("b", &[]), ("c", &["a", "b"])]);
        assert!(compare(Block::Normal, &cargo, &cargo, &members()).is_empty());
    }

    #[test]
    fn every_difference_names_its_crate() {
        let cargo = map(&[("a", &["b"]), ("b", &[]), ("c", &["a", "b"])]);
        let document = map(&[("a", &["b", "c"]), ("c", &["a"]), ("d", &[])]);
        assert_eq!(
            compare(Block::Normal, &document, &cargo, &members()),
            [
                "d: has a line in the crate-map block but is not a workspace crate",
                "a -> c: in the crate-map block, not in Cargo.toml",
                "b: a workspace crate with no line in the crate-map block",
                "c -> b: in Cargo.toml, missing from the crate-map block",
            ]
        );
    }

    #[test]
    fn a_crate_without_a_dev_line_has_no_dev_edges() {
        let cargo = map(&[("a", &["c"])]);
        assert!(compare(Block::Dev, &map(&[("a", &["c"])]), &cargo, &members()).is_empty());
        assert_eq!(
            compare(Block::Dev, &map(&[("b", &["a"])]), &cargo, &members()),
            [
                "a -> c: in Cargo.toml, missing from the crate-map-dev block",
                "b -> a: in the crate-map-dev block, not in Cargo.toml",
            ]
        );
    }

    #[test]
    fn a_block_is_read_line_by_line() {
        let document = "text\n```crate-map\na -> b, c\n\nb ->\n```\n```crate-map-dev\nb -> a\n```\n";
        assert_eq!(block(document, Block::Normal), map(&[("a", &["b", "c"]), ("b", &[])]));
        assert_eq!(block(document, Block::Dev), map(&[("b", &["a"])]));
    }
}
