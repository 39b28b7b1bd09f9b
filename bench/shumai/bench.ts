// bench.ts - Shumai client round trips against one or more echo endpoints: Shumai's own
// tfetch(url, tensor) (shumai/network/tensor.ts, unmodified, over HTTP through Bun's fetch)
// and, for targets named js:NAME, this tree's Bun package (js/: tfetch over libtfetch, which
// takes shared memory or UCX when the server offers them), fed the same Shumai tensors. Timed
// from the call to the decoded reply. Prints p50/p99 per target and size, one round trip at a
// time and, with BENCH_INFLIGHT=N, also with N round trips kept in flight (N async loops, each
// awaiting its tfetch before starting the next; a round trip is timed from its call to its
// reply, throughput over the wall time); then, for each js: target, how many times faster it
// is than the first Shumai-client target (p50 one at a time, req/s in flight).
// Runs from a scratch directory laid out by tests/shumai/setup.sh.
//
//   bun run bench.ts [js:]NAME=URL ...           URL: the echo route, e.g. http://h:p/echo
// Environment: BENCH_BIG_N (big round trips, default 10), BENCH_TINY_N (tiny round trips,
// default 1000), BENCH_BIG_MIB (big size, default 64), BENCH_TINY_BYTES (tiny size, a
// multiple of 4, default 16), BENCH_INFLIGHT (round trips in flight; default 0: one at a
// time only), BENCH_INFLIGHT_TINY_N (default 5000), BENCH_INFLIGHT_BIG_N (default 4 x
// BENCH_INFLIGHT; memory: about 3 x BENCH_INFLIGHT x the big size), TFETCH_JS_DIR (the
// package, for js: targets) and TFETCH_LIBRARY (the libtfetch it loads).
import { tfetch as shumaiTfetch } from './shumai/network/tensor'
import * as sm from './shumai/tensor'

// What a round trip returns, whichever client made it: its element count and its data.
type Reply = { elements: number; values: () => Float32Array }
type Fetch = (url: string, t: sm.Tensor) => Promise<Reply>

const shumaiFetch: Fetch = async (url, t) => {
  const r = await shumaiTfetch(url, t)
  return { elements: r ? r.elements : 0, values: () => r.toFloat32Array() }
}

let jsFetch: Fetch | null = null
async function loadJs(): Promise<Fetch> {
  if (!jsFetch) {
    const dir = process.env.TFETCH_JS_DIR
    if (!dir) throw 'a js: target needs TFETCH_JS_DIR (the package, js/ of the tree)'
    const pkg = await import(`${dir}/index.ts`)
    jsFetch = async (url, t) => {
      const r = await pkg.tfetch(url, t)
      return { elements: r ? r.data.length : 0, values: () => r.data as Float32Array }
    }
  }
  return jsFetch
}

const bigN = Number(process.env.BENCH_BIG_N || 10)
const tinyN = Number(process.env.BENCH_TINY_N || 1000)
const bigMiB = Number(process.env.BENCH_BIG_MIB || 64)
const tinyBytes = Number(process.env.BENCH_TINY_BYTES || 16)
const inflight = Number(process.env.BENCH_INFLIGHT || 0)
const inflightTinyN = Number(process.env.BENCH_INFLIGHT_TINY_N || 5000)
const inflightBigN = Number(process.env.BENCH_INFLIGHT_BIG_N || 4 * inflight)
if (!(tinyBytes >= 4 && tinyBytes % 4 === 0)) throw `BENCH_TINY_BYTES=${tinyBytes}: want a multiple of 4 (F32)`
if (!(inflight >= 0 && Number.isInteger(inflight))) throw `BENCH_INFLIGHT=${inflight}: want an integer >= 0`

function pct(sorted: number[], p: number): number {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[i]
}

function fmt(ms: number): string {
  return ms >= 100 ? `${(ms / 1000).toFixed(3)} s` : ms >= 1 ? `${ms.toFixed(2)} ms` : `${(ms * 1000).toFixed(0)} us`
}

function sizeLabel(bytes: number): string {
  return bytes >= 1048576 && bytes % 1048576 === 0 ? `${bytes / 1048576} MiB` : `${bytes} B`
}

function spotCheck(r: Reply, want: Float32Array) {
  const got = r.values()
  for (let k = 0; k < want.length; k += Math.max(1, want.length >> 10)) {
    if (got[k] !== want[k]) throw `reply differs at element ${k}`
  }
  if (got[want.length - 1] !== want[want.length - 1]) throw `reply differs at element ${want.length - 1}`
}

async function measure(tfetch: Fetch, url: string, t: sm.Tensor, n: number, warm: number) {
  const want = t.toFloat32Array()
  const times: number[] = []
  for (let i = 0; i < warm + n; i++) {
    const t0 = performance.now()
    let r: Reply
    try {
      r = await tfetch(url, t)
    } catch (e) {
      throw `round trip ${i + 1} of ${warm + n}: ${e}`
    }
    const dt = performance.now() - t0
    if (!r || r.elements !== want.length) throw `reply has ${r ? r.elements : 0} elements, want ${want.length}`
    if (i === 0) spotCheck(r, want)
    if (i >= warm) times.push(dt)
  }
  times.sort((a, b) => a - b)
  return { p50: pct(times, 50), p99: pct(times, 99), n, wall: 0 }
}

// n round trips, `depth` in flight: depth loops share a counter; each starts its next round
// trip when its previous one has been decoded.
async function pipeline(tfetch: Fetch, url: string, t: sm.Tensor, want: Float32Array, n: number, depth: number) {
  const times: number[] = []
  let next = 0
  let checked = false
  const loop = async () => {
    while (next < n) {
      const i = next++
      const t0 = performance.now()
      let r: Reply
      try {
        r = await tfetch(url, t)
      } catch (e) {
        throw `round trip ${i + 1} of ${n}: ${e}`
      }
      const dt = performance.now() - t0
      if (!r || r.elements !== want.length) throw `reply has ${r ? r.elements : 0} elements, want ${want.length}`
      if (!checked) {
        checked = true
        spotCheck(r, want)
      }
      times.push(dt)
    }
  }
  const w0 = performance.now()
  await Promise.all(Array.from({ length: Math.min(depth, n) }, loop))
  return { times, wall: performance.now() - w0 }
}

async function measureInflight(tfetch: Fetch, url: string, t: sm.Tensor, n: number, depth: number) {
  const want = t.toFloat32Array()
  await pipeline(tfetch, url, t, want, 2 * depth, depth) // warm-up: opens the connections
  const { times, wall } = await pipeline(tfetch, url, t, want, n, depth)
  times.sort((a, b) => a - b)
  return { p50: pct(times, 50), p99: pct(times, 99), n, wall }
}

const targets = process.argv.slice(2).map((a) => {
  const eq = a.indexOf('=')
  if (eq < 1) throw `bad target '${a}' (want NAME=URL)`
  return [a.slice(0, eq), a.slice(eq + 1)]
})
if (!targets.length) {
  console.error('usage: bun run bench.ts [js:]NAME=URL ...')
  process.exit(2)
}

const bigElems = (bigMiB * 1048576) / 4
const big = sm.tensor(Float32Array.from({ length: bigElems }, (_, i) => i & 0xffff)).reshape([bigElems / 1024, 1024])
const tiny = sm.tensor(Float32Array.from({ length: tinyBytes / 4 }, (_, i) => i + 1))
// MB/s counts both directions (a round trip moves the bytes twice): 2 x bytes / p50 one at a
// time, 2 x bytes x n / wall time with several in flight. req/s: 1 / p50, or n / wall time.
const rows: string[][] = [['target', 'size', 'in flight', 'n', 'p50', 'p99', 'req/s', 'MB/s (both ways)']]
let failures = 0
// per target and row (size, depth): the figure a speedup compares (p50 ms, or req/s)
const figures = new Map<string, Map<string, { p50: number; rps: number; depth: number }>>()
for (const [tlabel, url] of targets) {
  const js = tlabel.startsWith('js:')
  const name = js ? tlabel.slice(3) : tlabel
  let tfetch: Fetch
  try {
    tfetch = js ? await loadJs() : shumaiFetch
  } catch (e) {
    failures++
    rows.push([name, '-', '-', '-', 'failed', String(e).slice(0, 160), '', ''])
    continue
  }
  figures.set(tlabel, new Map())
  for (const [depth, t, n, warm, bytes] of [
    [1, tiny, tinyN, 20, tinyBytes],
    [1, big, bigN, 1, bigMiB * 1048576],
    [inflight, tiny, inflightTinyN, 0, tinyBytes],
    [inflight, big, inflightBigN, 0, bigMiB * 1048576]
  ] as [number, sm.Tensor, number, number, number][]) {
    if (depth < 1 || n < 1) continue
    const label = sizeLabel(bytes)
    try {
      const r = depth === 1 ? await measure(tfetch, url, t, n, warm) : await measureInflight(tfetch, url, t, n, depth)
      const secs = depth === 1 ? r.p50 / 1000 : r.wall / 1000
      const count = depth === 1 ? 1 : r.n
      const mbps = ((2 * bytes * count) / secs / 1e6).toFixed(bytes > 1e6 ? 0 : 3)
      const rps = (count / secs).toFixed(0)
      rows.push([name, label, String(depth), String(r.n), fmt(r.p50), fmt(r.p99), rps, mbps])
      figures.get(`${js ? 'js:' : ''}${name}`)!.set(`${label}|${depth}`, { p50: r.p50, rps: count / secs, depth })
    } catch (e) {
      failures++
      rows.push([name, label, String(depth), '-', 'failed', String(e).slice(0, 160), '', ''])
    }
  }
}
const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)))
for (const r of rows) console.log(r.map((v, c) => v.padEnd(widths[c])).join('  ').trimEnd())

// Speedups: each js: target against the first target that runs Shumai's own client.
const base = targets.find(([l]) => !l.startsWith('js:'))?.[0]
for (const [l] of targets) {
  if (!l.startsWith('js:') || !base) continue
  const ours = figures.get(l)
  const theirs = figures.get(base)
  if (!ours || !theirs) continue
  console.log(`\n${l.slice(3)} vs Shumai's own client (${base}), same run:`)
  for (const [key, o] of ours) {
    const b = theirs.get(key)
    if (!b) continue
    const [size] = key.split('|')
    const x = o.depth === 1 ? b.p50 / o.p50 : o.rps / b.rps
    const what = o.depth === 1 ? `p50 ${fmt(b.p50)} -> ${fmt(o.p50)}` : `${b.rps.toFixed(0)} -> ${o.rps.toFixed(0)} req/s`
    const goal = size.endsWith('MiB') ? 10 : 5
    console.log(`  ${size.padEnd(7)} ${String(o.depth).padStart(2)} in flight: ${x.toFixed(1)}x faster (${what}); target >= ${goal}x: ${x >= goal ? 'PASS' : 'MISS'}`)
  }
}
process.exit(failures ? 1 : 0)
