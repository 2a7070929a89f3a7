//! Reading the JSON profile ONNX Runtime writes: a Chrome trace, an array of events. Each node
//! that ran gives a `Node` event named `<node>_kernel_time` (beside `_fence_before` and
//! `_fence_after` markers of no duration) with its duration in µs and, in `args`, its op type,
//! its execution provider and the threads of the intra-op pool it could use.

use std::time::Duration;

use serde_json::Value;

use crate::{Layer, LayerStatus};

/// One node's kernel run.
pub(super) struct Node {
    pub name: String,
    pub op_type: String,
    pub provider: String,
    pub start_us: u64,
    pub dur_us: u64,
    /// Threads the node could run on, from `thread_scheduling_stats`: the calling thread plus
    /// the intra-op pool's (none when the pool has one thread: the stats are then empty).
    pub threads: usize,
}

impl Node {
    pub fn into_layer(self) -> Layer {
        Layer {
            name: self.name,
            layer_type: self.op_type,
            // ONNX Runtime names the provider, not the kernel
            exec_type: self.provider,
            status: LayerStatus::Executed,
            real_time: Duration::from_micros(self.dur_us),
            // ONNX Runtime's fusions replace nodes by a new one and the profile does not say
            // which; the layer's name is the fused node's
            fused: vec![],
        }
    }
}

/// The nodes of a profile in execution order.
pub(super) fn parse(text: &str) -> Result<Vec<Node>, String> {
    let events: Vec<Value> = serde_json::from_str(text).map_err(|e| format!("not a profile: {e}"))?;
    let mut nodes: Vec<Node> = events
        .iter()
        .filter(|e| e["cat"] == "Node")
        .filter_map(|e| {
            let name = e["name"].as_str()?.strip_suffix("_kernel_time")?;
            let args = &e["args"];
            Some(Node {
                name: name.to_string(),
                op_type: args["op_name"].as_str().unwrap_or_default().to_string(),
                provider: args["provider"].as_str().unwrap_or_default().to_string(),
                start_us: e["ts"].as_u64().unwrap_or(0),
                dur_us: e["dur"].as_u64().unwrap_or(0),
                threads: threads(&args["thread_scheduling_stats"]),
            })
        })
        .collect();
    nodes.sort_by_key(|n| n.start_us);
    Ok(nodes)
}

/// `{"main_thread": {..}, "sub_threads": {"<thread id>": {"num_run": .., "core": ..}, ..}}` with
/// a pool, `""` without: the calling thread and one entry per pool thread.
fn threads(stats: &Value) -> usize {
    1 + stats["sub_threads"].as_object().map_or(0, |subs| subs.len())
}
