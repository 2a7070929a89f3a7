//! The registry of swappable passes: partition passes and mapping searches, by name.

use bident_partition::PartitionPass;
use bident_search::MappingSearch;

use crate::{DriverError, Result};

/// The passes a driver can run, by name: bident's own, and any added with
/// [`Passes::add_search`] / [`Passes::add_partition`].
pub struct Passes {
    partition: Vec<Box<dyn PartitionPass>>,
    search: Vec<std::sync::Arc<dyn MappingSearch>>,
}

impl Default for Passes {
    /// bident's own passes.
    fn default() -> Self {
        Self {
            partition: bident_partition::builtin(),
            search: bident_search::pass::builtin().into_iter().map(std::sync::Arc::from).collect(),
        }
    }
}

impl Passes {
    /// Add a mapping search; a name already taken is an error.
    pub fn add_search(&mut self, s: Box<dyn MappingSearch>) -> Result<()> {
        if self.search.iter().any(|x| x.name() == s.name()) {
            return Err(DriverError::Invalid(format!("a search named `{}` is already registered", s.name())));
        }
        self.search.push(std::sync::Arc::from(s));
        Ok(())
    }

    /// Add a partition pass; a name already taken is an error.
    pub fn add_partition(&mut self, p: Box<dyn PartitionPass>) -> Result<()> {
        if self.partition.iter().any(|x| x.name() == p.name()) {
            return Err(DriverError::Invalid(format!("a partition pass named `{}` is already registered", p.name())));
        }
        self.partition.push(p);
        Ok(())
    }

    /// The search named `name`, shared (a server re-plans with it on threads of its own).
    pub fn shared_search(&self, name: &str) -> Option<std::sync::Arc<dyn MappingSearch>> {
        self.search.iter().find(|s| s.name() == name).cloned()
    }

    pub fn search(&self, name: &str) -> Result<&dyn MappingSearch> {
        self.search.iter().find(|s| s.name() == name).map(|s| s.as_ref()).ok_or_else(|| {
            DriverError::Invalid(format!("no search named `{name}` (registered: {})", names(self.searches())))
        })
    }

    pub fn partition(&self, name: &str) -> Result<&dyn PartitionPass> {
        self.partition.iter().find(|p| p.name() == name).map(|p| p.as_ref()).ok_or_else(|| {
            DriverError::Invalid(format!("no partition pass named `{name}` (registered: {})", names(self.partitions())))
        })
    }

    /// (name, what it does) of every search.
    pub fn searches(&self) -> Vec<(&str, &str)> {
        self.search.iter().map(|s| (s.name(), s.about())).collect()
    }

    /// (name, what it does) of every partition pass.
    pub fn partitions(&self) -> Vec<(&str, &str)> {
        self.partition.iter().map(|p| (p.name(), p.about())).collect()
    }
}

fn names(list: Vec<(&str, &str)>) -> String {
    list.into_iter().map(|(n, _)| n).collect::<Vec<_>>().join(", ")
}
