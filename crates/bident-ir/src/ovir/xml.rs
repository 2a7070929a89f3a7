//! Reading an IR's XML: its layers (ports, `<data>` attributes, opset) and edges, checked for
//! what the conversion relies on (numeric ids, known opsets, one incoming edge per port).

use std::collections::HashMap;

use bident_tensor::DType;

#[derive(Clone)]
pub(super) struct Port {
    pub id: u32,
    pub dtype: Option<DType>,
    pub dims: Vec<i64>,
    pub names: Vec<String>,
}

#[derive(Clone)]
pub(super) struct Layer {
    pub id: u32,
    pub name: String,
    pub ty: String,
    /// The op's opset (`opset4`), where an op changed its inputs between versions.
    pub version: String,
    pub data: HashMap<String, String>,
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    pub output_names: Option<String>,
}

impl Layer {
    pub fn attr(&self, k: &str) -> Option<&str> {
        self.data.get(k).map(String::as_str)
    }

    pub fn ints(&self, k: &str) -> Result<Vec<i64>, String> {
        let v = self.attr(k).ok_or_else(|| format!("missing attribute `{k}`"))?;
        v.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<i64>().map_err(|_| format!("attribute `{k}` = `{v}` is not a list of integers")))
            .collect()
    }

    pub fn float(&self, k: &str) -> Result<f32, String> {
        let v = self.attr(k).ok_or_else(|| format!("missing attribute `{k}`"))?;
        v.trim().parse::<f64>().map(|x| x as f32).map_err(|_| format!("attribute `{k}` = `{v}` is not a number"))
    }

    pub fn flag(&self, k: &str) -> bool {
        self.attr(k).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    }
}

/// Incoming edges: (to layer, to port) -> (from layer, from port).
pub(super) type Edges = HashMap<(u32, u32), (u32, u32)>;

/// The newest OpenVINO opset a layer may name (the pinned 2026.4.1 has opset1 to opset16).
const NEWEST_OPSET: u32 = 16;

/// `opset1` to the newest: a layer from an opset version this build does not know may mean
/// other inputs or attributes than the conversion reads, so it is refused, not guessed.
fn known_opset(v: &str) -> bool {
    v.strip_prefix("opset").and_then(|n| n.parse::<u32>().ok()).is_some_and(|n| (1..=NEWEST_OPSET).contains(&n))
}

pub(super) fn element_type(s: &str) -> Option<DType> {
    Some(match s.trim().to_ascii_lowercase().as_str() {
        "f32" | "fp32" => DType::F32,
        "f16" | "fp16" => DType::F16,
        "bf16" => DType::Bf16,
        "f64" | "fp64" => DType::F64,
        "i8" => DType::I8,
        "i16" => DType::I16,
        "i32" => DType::I32,
        "i64" => DType::I64,
        "u8" => DType::U8,
        "u16" => DType::U16,
        "u32" => DType::U32,
        "u64" => DType::U64,
        "boolean" | "bool" => DType::Bool,
        _ => return None,
    })
}

fn parse_ports(node: Option<roxmltree::Node>) -> Result<Vec<Port>, String> {
    let Some(node) = node else { return Ok(vec![]) };
    node.children()
        .filter(|c| c.has_tag_name("port"))
        .map(|p| {
            let id = p.attribute("id").and_then(|v| v.parse().ok()).ok_or("a port without a numeric id")?;
            let dims = p
                .children()
                .filter(|c| c.has_tag_name("dim"))
                .map(|d| {
                    let t = d.text().unwrap_or("").trim();
                    t.parse::<i64>()
                        .ok()
                        .filter(|&v| v >= -1)
                        .ok_or_else(|| format!("port {id}: dim `{t}` is not a size or -1"))
                })
                .collect::<Result<_, _>>()?;
            let names = p
                .attribute("names")
                .map(|n| {
                    let mut out = vec![String::new()];
                    let mut chars = n.chars().peekable();
                    while let Some(c) = chars.next() {
                        match c {
                            '\\' if chars.peek() == Some(&',') => out.last_mut().expect("non-empty").push(','),
                            ',' => out.push(String::new()),
                            c => out.last_mut().expect("non-empty").push(c),
                        }
                    }
                    out.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
                })
                .unwrap_or_default();
            Ok(Port { id, dtype: p.attribute("precision").and_then(element_type), dims, names })
        })
        .collect()
}

/// The layers, in file order, and the edges of an IR's XML text.
pub(super) fn parse(xml: &str) -> Result<(Vec<Layer>, Edges), String> {
    let doc = roxmltree::Document::parse(xml).map_err(|e| format!("not XML: {e}"))?;
    let net = doc.root_element();
    if !net.has_tag_name("net") {
        return Err(format!("the root element is <{}>, not <net>", net.tag_name().name()));
    }
    let version = net.attribute("version").unwrap_or("?");
    if !matches!(version, "10" | "11") {
        return Err(format!("IR version {version} (bident reads versions 10 and 11)"));
    }
    fn child<'a, 'i>(n: roxmltree::Node<'a, 'i>, tag: &str) -> Option<roxmltree::Node<'a, 'i>> {
        n.children().find(|c| c.has_tag_name(tag))
    }
    let mut layers = vec![];
    for l in child(net, "layers").ok_or("no <layers>")?.children().filter(|c| c.has_tag_name("layer")) {
        let id: u32 = l.attribute("id").and_then(|v| v.parse().ok()).ok_or("a layer without a numeric id")?;
        let label = l.attribute("name").unwrap_or("").to_string();
        let ctx = |e: String| format!("layer {id} `{label}`: {e}");
        let version = l.attribute("version").unwrap_or("").to_string();
        if !known_opset(&version) {
            return Err(ctx(format!("opset `{version}` is not one this build knows (opset1 to opset{NEWEST_OPSET})")));
        }
        layers.push(Layer {
            id,
            name: label.clone(),
            ty: l.attribute("type").ok_or_else(|| ctx("no type".into()))?.to_string(),
            version,
            data: child(l, "data")
                .map(|d| d.attributes().map(|a| (a.name().to_string(), a.value().to_string())).collect())
                .unwrap_or_default(),
            inputs: parse_ports(child(l, "input")).map_err(ctx)?,
            outputs: parse_ports(child(l, "output")).map_err(ctx)?,
            output_names: l.attribute("output_names").map(str::to_string),
        });
    }
    let mut edges: Edges = HashMap::new();
    if let Some(es) = child(net, "edges") {
        for e in es.children().filter(|c| c.has_tag_name("edge")) {
            let num =
                |k: &str| e.attribute(k).and_then(|v| v.parse::<u32>().ok()).ok_or(format!("an edge without {k}"));
            let (fl, fp, tl, tp) = (num("from-layer")?, num("from-port")?, num("to-layer")?, num("to-port")?);
            if edges.insert((tl, tp), (fl, fp)).is_some() {
                return Err(format!("layer {tl} port {tp} has two incoming edges"));
            }
        }
    }
    Ok((layers, edges))
}
