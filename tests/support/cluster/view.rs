//! `CLUSTER INFO` and `CLUSTER NODES` replies, parsed.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::RangeInclusive;

/// A parsed `CLUSTER INFO` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    fields: BTreeMap<String, String>,
    raw: String,
}

impl ClusterInfo {
    pub fn parse(text: &str) -> Self {
        let fields = text
            .lines()
            .filter_map(|line| line.trim().split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Self {
            fields,
            raw: text.to_owned(),
        }
    }

    /// A field, e.g. `get("cluster_state") == Some("ok")`.
    pub fn get(&self, field: &str) -> Option<&str> {
        self.fields.get(field).map(String::as_str)
    }

    /// A numeric field (`cluster_slots_ok`, `cluster_known_nodes`, ...).
    pub fn number(&self, field: &str) -> Option<u64> {
        self.get(field)?.parse().ok()
    }

    /// `cluster_state:ok`.
    pub fn is_ok(&self) -> bool {
        self.get("cluster_state") == Some("ok")
    }

    /// The reply as Redis sent it.
    pub fn raw(&self) -> &str {
        &self.raw
    }
}

impl fmt::Display for ClusterInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEntry {
    pub id: String,
    /// Client port (0 for a `noaddr` node).
    pub port: u16,
    pub flags: Vec<String>,
    /// The master's id, for a replica.
    pub master_id: Option<String>,
    pub config_epoch: u64,
    /// Link state `connected`.
    pub connected: bool,
    /// Owned slot ranges.
    pub slots: Vec<RangeInclusive<u16>>,
    /// `[slot->-id]` (migrating) and `[slot-<-id]` (importing) markers; only
    /// on the `myself` line.
    pub open_slots: Vec<String>,
}

impl NodeEntry {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    pub fn is_master(&self) -> bool {
        self.has_flag("master")
    }

    pub fn is_replica(&self) -> bool {
        self.has_flag("slave")
    }

    pub fn is_myself(&self) -> bool {
        self.has_flag("myself")
    }

    /// Flagged `fail` (agreed failure; `fail?` is only suspected).
    pub fn is_failed(&self) -> bool {
        self.has_flag("fail")
    }

    pub fn owns(&self, slot: u16) -> bool {
        self.slots.iter().any(|r| r.contains(&slot))
    }

    pub fn slot_count(&self) -> usize {
        self.slots
            .iter()
            .map(|r| usize::from(r.end() - r.start()) + 1)
            .sum()
    }

    fn parse(line: &str) -> Result<Self, String> {
        let bad = || format!("malformed CLUSTER NODES line: {line:?}");
        let mut parts = line.split_whitespace();
        let mut next = || parts.next().ok_or_else(bad);
        let id = next()?.to_owned();
        let addr = next()?;
        let flags = next()?.split(',').map(str::to_owned).collect();
        let master = next()?;
        let _ping_sent = next()?;
        let _pong_recv = next()?;
        let config_epoch = next()?.parse().map_err(|_| bad())?;
        let link = next()?;
        // ip:port@cport[,hostname]
        let host_port = addr.split('@').next().unwrap_or_default();
        let port_text = host_port.rsplit(':').next().unwrap_or_default();
        let port = port_text.parse().map_err(|_| bad())?;
        let mut slots = Vec::new();
        let mut open_slots = Vec::new();
        for token in parts {
            if token.starts_with('[') {
                open_slots.push(token.to_owned());
            } else if let Some((a, b)) = token.split_once('-') {
                let (a, b) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                slots.push(a..=b);
            } else {
                let s = token.parse().map_err(|_| bad())?;
                slots.push(s..=s);
            }
        }
        Ok(Self {
            id,
            port,
            flags,
            master_id: (master != "-").then(|| master.to_owned()),
            config_epoch,
            connected: link == "connected",
            slots,
            open_slots,
        })
    }
}

/// One node's parsed `CLUSTER NODES` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterView {
    pub entries: Vec<NodeEntry>,
    raw: String,
}

/// What must be equal in two nodes' views for them to agree: per node id,
/// (is master, master id, slots, agreed failure).
pub(super) type Normalized =
    BTreeMap<String, (bool, Option<String>, Vec<RangeInclusive<u16>>, bool)>;

impl ClusterView {
    pub fn parse(text: &str) -> Result<Self, String> {
        let entries = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(NodeEntry::parse)
            .collect::<Result<_, _>>()?;
        Ok(Self {
            entries,
            raw: text.to_owned(),
        })
    }

    /// The reply as Redis sent it.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The answering node's own line.
    pub fn myself(&self) -> Option<&NodeEntry> {
        self.entries.iter().find(|e| e.is_myself())
    }

    pub fn get(&self, id: &str) -> Option<&NodeEntry> {
        self.entries.iter().find(|e| e.id == id)
    }

    /// The master that owns `slot` in this view.
    pub fn owner_of(&self, slot: u16) -> Option<&NodeEntry> {
        self.entries.iter().find(|e| e.is_master() && e.owns(slot))
    }

    pub(super) fn normalized(&self) -> Normalized {
        self.entries
            .iter()
            .map(|e| {
                (
                    e.id.clone(),
                    (
                        e.is_master(),
                        e.master_id.clone(),
                        e.slots.clone(),
                        e.is_failed(),
                    ),
                )
            })
            .collect()
    }
}

impl fmt::Display for ClusterView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}
