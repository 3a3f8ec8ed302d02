#!/usr/bin/env python3
"""Warp-stall samples and executed instructions of a kernel, per device function.

    tools/ncu-functions.py LISTING.sass SOURCE.csv[.gz]

LISTING.sass: the kernel's disassembly from tools/sass.sh (same source and flags as the
profiled build), whose function labels give each function's first offset. SOURCE.csv:
`ncu -i REPORT --page source --csv --print-source sass` of one profiled launch (sections
SourceCounters and WarpStateStats). Offsets are counted from the kernel's first
instruction in both, so the two must come from the same code. Prints the stall reasons
of the whole kernel, then per function its share of the samples and of the warp
instructions, the threads busy an instruction, and its three largest stall reasons.
"""
import bisect
import collections
import csv
import gzip
import re
import sys


def function_starts(listing):
    """(offset, name) of every function in the listing, the kernel's body first."""
    starts = [(0, 'kernel')]
    pending = None
    for line in open(listing):
        text = line.strip()
        if text.startswith('$') and text.endswith(':'):
            mangled = text[:-1].split('$')[-1]
            m = re.search(r'\d+(astc_\w+?|png_\w+?|bc1_\w+?|kiln_\w+?)E', mangled)
            pending = m.group(1) if m else mangled[:40]
            continue
        m = re.search(r'/\*([0-9a-f]{4,})\*/', line)
        if m and pending:
            starts.append((int(m.group(1), 16), pending))
            pending = None
    return starts


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    starts = function_starts(sys.argv[1])
    offsets = [o for o, _ in starts]
    opener = gzip.open if sys.argv[2].endswith('.gz') else open
    rows = list(csv.reader(opener(sys.argv[2], 'rt')))
    header, data = rows[1], rows[2:]
    col = {name: i for i, name in enumerate(header)}
    reasons = [h for h in header if h.startswith('stall_') and 'Not Issued' not in h]
    base = int(data[0][col['Address']], 16)
    per_fn = collections.defaultdict(collections.Counter)
    total = collections.Counter()
    for r in data:
        fn = starts[bisect.bisect_right(offsets, int(r[col['Address']], 16) - base) - 1][1]
        values = {'samples': r[col['Warp Stall Sampling (All Samples)']],
                  'inst': r[col['Instructions Executed']],
                  'threads': r[col['Thread Instructions Executed']]}
        values.update({h: r[col[h]] for h in reasons})
        for key, v in values.items():
            per_fn[fn][key] += int(v or 0)
            total[key] += int(v or 0)
    print('samples %d, warp instructions %d, threads busy an instruction %.1f' %
          (total['samples'], total['inst'], total['threads'] / max(total['inst'], 1)))
    print('stalls: ' + ', '.join('%s %.1f%%' % (h[6:], 100 * total[h] / total['samples'])
                                 for h in sorted(reasons, key=lambda h: -total[h])[:8]))
    for fn, c in sorted(per_fn.items(), key=lambda kv: -kv[1]['samples'])[:20]:
        top = sorted(reasons, key=lambda h: -c[h])[:3]
        print('%-28s samples %5.1f%%  instructions %5.1f%%  threads %4.1f  %s' % (
            fn[:28], 100 * c['samples'] / total['samples'], 100 * c['inst'] / max(total['inst'], 1),
            c['threads'] / max(c['inst'], 1),
            ' '.join('%s %.0f%%' % (h[6:], 100 * c[h] / max(c['samples'], 1)) for h in top)))


if __name__ == '__main__':
    main()
