//! Image classifiers: ResNet-50 (convolutions) and ViT-B/16 (a transformer over patches).

use super::Net;

pub(super) fn resnet(n: &mut Net, full: bool) {
    let (s, w, blocks) = if full { (224, 64, [3, 4, 6, 3]) } else { (64, 16, [1, 1, 1, 1]) };
    let x = n.input("image", &[1, 3, s, s]);
    let c = n.conv(&x, 3, w, 7, 2, 3);
    let c = n.batchnorm(&c, w);
    let c = n.relu(&c);
    let mut x = n.op(
        "MaxPool",
        &[&c],
        &[("kernel_shape", vec![3, 3].into()), ("strides", vec![2, 2].into()), ("pads", vec![1; 4].into())],
    );
    let mut cin = w;
    for (stage, &count) in blocks.iter().enumerate() {
        let mid = w << stage;
        let out = mid * 4;
        for i in 0..count {
            let stride = if i == 0 && stage > 0 { 2 } else { 1 };
            let a = n.conv(&x, cin, mid, 1, 1, 0);
            let a = n.batchnorm(&a, mid);
            let a = n.relu(&a);
            let a = n.conv(&a, mid, mid, 3, stride, 1);
            let a = n.batchnorm(&a, mid);
            let a = n.relu(&a);
            let a = n.conv(&a, mid, out, 1, 1, 0);
            let a = n.batchnorm(&a, out);
            let skip = if i == 0 {
                let p = n.conv(&x, cin, out, 1, stride, 0);
                n.batchnorm(&p, out)
            } else {
                x.clone()
            };
            let sum = n.op("Add", &[&a, &skip], &[]);
            x = n.relu(&sum);
            cin = out;
        }
    }
    let p = n.op("GlobalAveragePool", &[&x], &[]);
    let f = n.op("Flatten", &[&p], &[]);
    let y = n.linear(&f, cin, 1000, true);
    n.output(&y);
}

pub(super) fn vit(n: &mut Net, full: bool) {
    let (s, p, d, layers, h, mlp) = if full { (224, 16, 768, 12, 12, 3072) } else { (32, 8, 64, 2, 4, 128) };
    let img = n.input("image", &[1, 3, s, s]);
    let tokens = n.patch_embed(&img, (3, s, p, d));
    let cls = n.bias(&[1, 1, d]);
    let mut x = n.concat(&[&cls, &tokens], 1);
    let t = (s / p) * (s / p) + 1;
    for _ in 0..layers {
        x = n.encoder_layer(&x, (t, d, h, mlp));
    }
    let x = n.layer_norm(&x, d);
    let c = n.slice(&x, 1, 0, 1);
    let c = n.reshape(&c, &[1, d as i64]);
    let y = n.linear(&c, d, 1000, true);
    n.output(&y);
}
