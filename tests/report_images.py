"""Checks `rlhf plot`'s images: report_images.py SVG STEPS PNG_A PNG_B [PNG...]

Every PNG has PNG's signature, an IHDR of a page of panels (at least 720 x 300: two 360-pixel
columns and a row) and a plausible size; the SVG parses as XML with an <svg> root of such a
size, whose training curves (blue strokes) are drawn through all STEPS logged points in at least
the loss, learning-rate and grad-norm panels and whose eval curve (orange) is there too; and all
the PNGs differ pairwise (PNG_A and PNG_B are two runs plotted under the same
file name, so only their curves can make them differ). Python's standard library only."""
import itertools
import struct
import sys
import xml.etree.ElementTree as ET


def png_size(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13, f"{path}: no IHDR first"
    w, h = struct.unpack(">II", data[16:24])
    assert data.rstrip(b"\0")[-8:-4] == b"IEND", f"{path}: truncated (no IEND)"
    return w, h, data


def main():
    svg, steps, pngs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    images = {}
    for p in pngs:
        w, h, data = png_size(p)
        assert w >= 720 and h >= 300, f"{p}: {w} x {h} is too small for the panels"
        assert 10_000 < len(data) < 5_000_000, f"{p}: {len(data)} bytes"
        images[p] = data
        print(f"{p}: {w} x {h}, {len(data)} bytes")
    for a, b in itertools.combinations(pngs, 2):
        assert images[a] != images[b], f"{a} and {b} are the same image"
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg"), f"{svg}: root {root.tag}"
    w = float(root.get("width").rstrip("pt"))
    assert w >= 720, f"{svg}: width {w}"
    train = eval_ = 0
    for path in root.iter("{http://www.w3.org/2000/svg}path"):
        style, d = path.get("style", ""), path.get("d", "")
        if "fill:none" in style and "stroke:rgb(12%,40%,75%)" in style and d.count("L") == steps - 1:
            train += 1
        if "fill:none" in style and "stroke:rgb(90%,45%,8%)" in style and d.count("L") >= 1:
            eval_ += 1
    assert train >= 3 and eval_ >= 1, f"{svg}: {train} training curves of {steps} points, {eval_} eval curves"
    print(f"{svg}: svg {root.get('width')} x {root.get('height')}, {train} training curves of "
          f"{steps} points, {eval_} eval curves")


if __name__ == "__main__":
    main()
