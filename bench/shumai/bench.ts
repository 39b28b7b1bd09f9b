// bench.ts - Shumai client round trips: Shumai's own tfetch(url, tensor) (shumai/network/
// tensor.ts, unmodified) against one or more echo endpoints, timed from the call to the
// decoded reply (encodeBinary's copy, HTTP both ways, decodeBinary). Prints p50/p99 per
// target and size. Runs from a scratch directory laid out by tests/shumai/setup.sh.
//
//   bun run bench.ts NAME=URL [NAME=URL ...]       URL: the echo route, e.g. http://h:p/echo
// Environment: BENCH_BIG_N (64 MiB round trips, default 10), BENCH_TINY_N (16-byte round
// trips, default 1000), BENCH_BIG_MIB (default 64).
import { tfetch } from './shumai/network/tensor'
import * as sm from './shumai/tensor'

const bigN = Number(process.env.BENCH_BIG_N || 10)
const tinyN = Number(process.env.BENCH_TINY_N || 1000)
const bigMiB = Number(process.env.BENCH_BIG_MIB || 64)

function pct(sorted: number[], p: number): number {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[i]
}

function fmt(ms: number): string {
  return ms >= 100 ? `${(ms / 1000).toFixed(3)} s` : ms >= 1 ? `${ms.toFixed(2)} ms` : `${(ms * 1000).toFixed(0)} us`
}

async function measure(url: string, t: sm.Tensor, n: number, warm: number) {
  const want = t.toFloat32Array()
  const times: number[] = []
  for (let i = 0; i < warm + n; i++) {
    const t0 = performance.now()
    let r: sm.Tensor
    try {
      r = await tfetch(url, t)
    } catch (e) {
      throw `round trip ${i + 1} of ${warm + n}: ${e}`
    }
    const dt = performance.now() - t0
    if (!r || r.elements !== want.length) throw `reply has ${r ? r.elements : 0} elements, want ${want.length}`
    if (i === 0) {
      const got = r.toFloat32Array()
      for (let k = 0; k < want.length; k += Math.max(1, want.length >> 10)) {
        if (got[k] !== want[k]) throw `reply differs at element ${k}`
      }
    }
    if (i >= warm) times.push(dt)
  }
  times.sort((a, b) => a - b)
  return { p50: pct(times, 50), p99: pct(times, 99), n }
}

const targets = process.argv.slice(2).map((a) => {
  const eq = a.indexOf('=')
  if (eq < 1) throw `bad target '${a}' (want NAME=URL)`
  return [a.slice(0, eq), a.slice(eq + 1)]
})
if (!targets.length) {
  console.error('usage: bun run bench.ts NAME=URL [NAME=URL ...]')
  process.exit(2)
}

const bigElems = (bigMiB * 1048576) / 4
const big = sm.tensor(Float32Array.from({ length: bigElems }, (_, i) => i & 0xffff)).reshape([bigElems / 1024, 1024])
const tiny = sm.tensor(Float32Array.of(1, 2, 3, 4))
const rows: string[][] = [['target', 'size', 'n', 'p50', 'p99', 'MB/s at p50']]
let failures = 0
for (const [name, url] of targets) {
  for (const [label, t, n, warm, bytes] of [
    ['16 B', tiny, tinyN, 20, 16],
    [`${bigMiB} MiB`, big, bigN, 1, bigMiB * 1048576]
  ] as [string, sm.Tensor, number, number, number][]) {
    try {
      const r = await measure(url, t, n, warm)
      // a round trip moves the bytes twice
      const mbps = ((2 * bytes) / (r.p50 / 1000) / 1e6).toFixed(bytes > 1e6 ? 0 : 3)
      rows.push([name, label, String(r.n), fmt(r.p50), fmt(r.p99), mbps])
    } catch (e) {
      failures++
      rows.push([name, label, '-', 'failed', String(e).slice(0, 160), ''])
    }
  }
}
const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)))
for (const r of rows) console.log(r.map((v, c) => v.padEnd(widths[c])).join('  ').trimEnd())
process.exit(failures ? 1 : 0)
