//! Recurrent sequences: LSTMSequence, GRUSequence and RNNSequence as ONNX LSTM, GRU and RNN.

use bident_tensor::DType;

use super::xml::Layer;
use super::{A, Args, Converter, Registry};

pub(super) fn register(r: &mut Registry) {
    // outputs: Y and the final states (an LSTM has two, hidden and cell)
    r.add_outputs(&["LSTMSequence"], 3, rnn_sequence);
    r.add_outputs(&["GRUSequence", "RNNSequence"], 2, rnn_sequence);
}

/// LSTMSequence-5, GRUSequence-5 and RNNSequence-5 (X [B,T,I], initial states [B,D,H],
/// lengths [B], W [D,G*H,I], R [D,G*H,H], B [D,G*H]) as ONNX LSTM, GRU and RNN (sequence
/// first, between Transposes). LSTM gates go from f,i,c,o to i,o,f,c; GRU's z,r,h and the
/// RNN's single gate keep their order. OpenVINO's bias is the sum of ONNX's Wb and Rb, so Rb
/// is zero, except for a GRU with `linear_before_reset`, whose bias [D,4H] carries the
/// hidden gate's Rb last.
fn rnn_sequence(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (id, name, i, l) = (a.id, a.name, &a.i, a.l);
    let (op, gates, default_acts, states) = match l.ty.as_str() {
        "LSTMSequence" => ("LSTM", 4u64, "sigmoid, tanh, tanh", 2),
        "GRUSequence" => ("GRU", 3, "sigmoid, tanh", 1),
        _ => ("RNN", 1, "tanh", 1),
    };
    // inputs: X, initial states, lengths, W, R, B
    let [x, lens, w, r, b] = [0, 1 + states, 2 + states, 3 + states, 4 + states].map(|k| i.get(k).copied());
    let (Some(x), Some(lens), Some(w), Some(r), Some(b)) = (x, lens, w, r, b) else {
        return Err(format!("needs {} inputs", 5 + states));
    };
    let cell = Cell::of(l, op, gates, default_acts)?;
    let (wt, ws, wd) = cell.weight(c, w, "W", cell.gates)?;
    let (rt, rs, rd) = cell.weight(c, r, "R", cell.gates)?;
    let (bt, bs, bd) = cell.onnx_bias(cell.weight(c, b, "B", cell.gates + u64::from(cell.before_reset))?)?;
    let w = c.constant(&format!("{name}/W"), wt, ws, wd.into());
    let r = c.constant(&format!("{name}/R"), rt, rs, rd.into());
    let b = c.constant(&format!("{name}/B"), bt, bs, bd.into());
    let lens = c.op("Cast", name, &[lens], vec![("to", A::I(DType::I32.onnx_code() as i64))]);
    // ONNX's default layout is sequence first (X [T,B,I], states [D,B,H], Y [T,D,B,H]);
    // OpenVINO's CPU plugin mis-reads `layout = 1`, so transpose around the op instead
    let swap01 = || vec![("perm", A::Is(vec![1, 0, 2]))];
    let x = c.op("Transpose", name, &[x], swap01());
    let init: Vec<String> = (0..states).map(|k| c.op("Transpose", name, &[i[1 + k]], swap01())).collect();
    let outs = c.name_outputs(id);
    let y = c.fresh(name);
    let finals: Vec<String> = (0..states).map(|_| c.fresh(name)).collect();
    let mut attrs = vec![
        ("hidden_size", A::I(cell.hidden)),
        (
            "direction",
            A::S(match l.attr("direction").unwrap_or("forward") {
                "reverse" => "reverse",
                "bidirectional" => "bidirectional",
                _ => "forward",
            }),
        ),
    ];
    if cell.before_reset {
        attrs.push(("linear_before_reset", A::I(1)));
    }
    let mut inputs: Vec<&str> = vec![&x, &w, &r, &b, &lens];
    inputs.extend(init.iter().map(String::as_str));
    let mut outputs: Vec<&str> = vec![&y];
    outputs.extend(finals.iter().map(String::as_str));
    c.node(cell.op, name, &inputs, &outputs, attrs);
    // Y [T,D,B,H] -> [B,D,T,H]; states [D,B,H] -> [B,D,H]
    c.node("Transpose", name, &[&y], &[&outs[0]], vec![("perm", A::Is(vec![2, 1, 0, 3]))]);
    for (k, f) in finals.iter().enumerate() {
        c.node("Transpose", name, &[f], &[&outs[1 + k]], swap01());
    }
    Ok(())
}

/// A constant's element type, shape and bytes.
type Constant = (DType, Vec<u64>, Vec<u8>);

/// The recurrent cell a sequence layer runs, as ONNX names it.
struct Cell {
    op: &'static str,
    gates: u64,
    hidden: i64,
    /// A GRU with `linear_before_reset`.
    before_reset: bool,
}

impl Cell {
    /// The layer's cell `op` of `gates` gates, or why ONNX cannot compute it (activations other
    /// than `default_acts`, a clip).
    fn of(l: &Layer, op: &'static str, gates: u64, default_acts: &str) -> Result<Self, String> {
        let hidden = l.ints("hidden_size")?.first().copied().ok_or("no hidden_size")?;
        // a size from the file: multiplied below, so bounded here
        if !(1..=1 << 20).contains(&hidden) {
            return Err(format!("hidden_size {hidden} is not a size (1 to 2^20)"));
        }
        let acts: Vec<String> =
            l.attr("activations").unwrap_or(default_acts).split(',').map(|s| s.trim().to_string()).collect();
        if acts.join(", ") != default_acts {
            return Err(format!("activations {acts:?} are not supported"));
        }
        if l.float("clip").unwrap_or(0.0) != 0.0 {
            return Err("clip is not supported".into());
        }
        let before_reset = op == "GRU" && l.flag("linear_before_reset");
        Ok(Self { op, gates, hidden, before_reset })
    }

    /// The constant `t` (input `what`) of `blocks` gate blocks along axis 1, in ONNX's gate order.
    fn weight(&self, c: &Converter, t: &str, what: &str, blocks: u64) -> Result<Constant, String> {
        let hidden = self.hidden;
        let (dtype, shape, data) = c.consts.get(t).cloned().ok_or_else(|| format!("{what} must be a constant"))?;
        if shape.len() < 2 || shape[0] == 0 || shape[1] != blocks * hidden as u64 {
            return Err(format!("{what} has shape {shape:?}, not [directions, {blocks} x {hidden}, ..]"));
        }
        // LSTM: blocks along axis 1 from f,i,c,o to i,o,f,c
        let order: &[usize] = if self.op == "LSTM" && blocks == 4 { &[1, 3, 0, 2] } else { &[] };
        if order.is_empty() {
            return Ok((dtype, shape, data.to_vec()));
        }
        let d = shape[0] as usize;
        let per_dir = data.len() / d;
        let block = per_dir / 4;
        let mut out = Vec::with_capacity(data.len());
        for k in 0..d {
            let dir = &data[k * per_dir..(k + 1) * per_dir];
            for &g in order {
                out.extend_from_slice(&dir[g * block..(g + 1) * block]);
            }
        }
        Ok((dtype, shape, out))
    }

    /// OpenVINO's bias B as ONNX's, per direction Wb (G*H) then Rb (G*H).
    fn onnx_bias(&self, (bt, bs, bd): Constant) -> Result<Constant, String> {
        let (d, size) = (bs[0] as usize, bt.size());
        let (gh, per) = (self.gates as usize * self.hidden as usize * size, bd.len().checked_div(d).unwrap_or(0));
        if per < gh || per * d != bd.len() {
            return Err(format!("B holds {} bytes, not {d} directions of at least {gh}", bd.len()));
        }
        let mut b2 = Vec::with_capacity(2 * gh * d);
        for k in 0..d {
            let dir = &bd[k * per..(k + 1) * per];
            b2.extend_from_slice(&dir[..gh]);
            b2.extend(std::iter::repeat_n(0u8, gh));
            if self.before_reset {
                // the hidden gate's Rb is the fourth block; it goes last in Rb
                let rb_h = &dir[gh..];
                let at = b2.len() - rb_h.len();
                b2[at..].copy_from_slice(rb_h);
            }
        }
        Ok((bt, vec![bs[0], 2 * self.gates * self.hidden as u64], b2))
    }
}
