// client.ts - drives tfetchd with Shumai's own client code: tfetch() from
// @shumai/shumai 0.0.13 shumai/network/tensor.ts, which encodes and decodes with Shumai's
// shumai/io/encode.ts. tests/shumai/setup.sh lays those files out beside this one, unmodified,
// with our stand-ins for the modules they import (see standins/).
//
//   bun run client.ts fixtures DIR   writes DIR/f32.bin (F32 [2,3]) and DIR/i32.bin (I32 [2,3])
//   TFETCH_URL=http://127.0.0.1:PORT bun run client.ts test
//       expects f32.bin stored as TFETCH_F32 (default shumai_f32), i32.bin as TFETCH_I32
//       (default shumai_i32), and the routes echo and accumulate; exits 1 if any check fails.
import { tfetch } from './shumai/network/tensor'
import * as sm from './shumai/tensor'

const F32 = Float32Array.of(0.5, -1, 2.25, 3, -4.5, 1e10)
const I32 = Int32Array.of(1, 2, 3, 4, 5, 6)
const TIMEOUT_MS = 30000

function fail(msg: string): never {
  throw new Error(msg)
}

function eqArray(got: ArrayLike<number>, want: ArrayLike<number>, what: string) {
  if (got.length !== want.length) fail(`${what}: ${got.length} elements, want ${want.length}`)
  for (let i = 0; i < want.length; i++) {
    if (!Object.is(got[i], want[i])) fail(`${what}[${i}] = ${got[i]}, want ${want[i]}`)
  }
}

function eqShape(t: sm.Tensor, want: number[], what: string) {
  if (!t) fail(`${what}: no tensor (empty reply)`)
  if (t.shape.join(',') !== want.join(',')) fail(`${what}: shape [${t.shape}], want [${want}]`)
}

function timed<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: Timer
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer in ${TIMEOUT_MS} ms`)), TIMEOUT_MS)
  })
  return Promise.race([p, t]).finally(() => clearTimeout(timer))
}

// The int64 a provenance string stands for. Shumai writes BigInt('0x' + id) into a
// BigInt64Array and reads it back with toString(16), which drops leading zeros (id "0a1b2c3d"
// comes back as "a1b2c3d") and prints negative words with a '-': compare values, not spellings.
function idValue(s: string): bigint {
  const neg = s.startsWith('-')
  const v = BigInt('0x' + (neg ? s.slice(1) : s))
  return BigInt.asIntN(64, neg ? -v : v)
}

function sameId(a: string | null, b: string | null): boolean {
  return !!a && !!b && idValue(a) === idValue(b)
}

function randomId(): string {
  // 8 hex digits like Shumai's own ids; the leading digit nonzero and not "ffffffff" (none)
  const v = 0x10000000 + Math.floor(Math.random() * 0xe0000000)
  return v.toString(16)
}

function mk(data: number[], shape: number[]): sm.Tensor {
  return sm.tensor(Float32Array.from(data)).reshape(shape)
}

// tfetch must fail, and a plain fetch of the same request must say why in a 4xx answer.
async function expectRefused(url: string, body: sm.Tensor | undefined, status: number[],
                             words: RegExp) {
  let got: sm.Tensor | undefined
  try {
    got = await timed(tfetch(url, body), `tfetch ${url}`)
  } catch (e) {
    got = undefined
  }
  if (got !== undefined) fail(`tfetch ${url} returned a tensor of shape [${got.shape}]`)
  const res = await timed(fetch(url), `fetch ${url}`)
  const text = await res.text()
  if (!status.includes(res.status)) fail(`GET ${url}: HTTP ${res.status}, want ${status}: ${text}`)
  if (!words.test(text)) fail(`GET ${url}: HTTP ${res.status} body does not match ${words}: ${text}`)
}

async function runTests(base: string): Promise<boolean> {
  const f32 = process.env.TFETCH_F32 || 'shumai_f32'
  const i32 = process.env.TFETCH_I32 || 'shumai_i32'
  const checks: [string, () => Promise<void>][] = [
    [`GET /${f32}: a stored F32 [2,3] tensor`, async () => {
      const t = await timed(tfetch(`${base}/${f32}`), 'tfetch')
      eqShape(t, [2, 3], 'reply')
      eqArray(t.toFloat32Array(), F32, 'data')
    }],
    ['POST /echo: data, shape and provenance come back', async () => {
      const x = mk([1, 2, 3, 4, 5, 6], [3, 2])
      const t = await timed(tfetch(`${base}/echo`, x), 'tfetch')
      eqShape(t, [3, 2], 'reply')
      eqArray(t.toFloat32Array(), x.toFloat32Array(), 'data')
      // tfetch stamped x with this process's Shumai id; the reply must carry it back
      if (!x.provenance) fail('tfetch did not stamp a provenance')
      if (!sameId(x.provenance, t.provenance))
        fail(`reply provenance ${t.provenance}, sent ${x.provenance}`)
    }],
    ['POST /echo: an explicit id with leading zeros, a scalar, an empty tensor', async () => {
      const s = sm.scalar(-7.25)
      const t = await timed(tfetch(`${base}/echo`, s, { id: '0000beef' }), 'tfetch scalar')
      eqShape(t, [], 'scalar reply')
      eqArray(t.toFloat32Array(), [-7.25], 'scalar data')
      if (t.provenance !== 'beef') fail(`reply provenance ${t.provenance}, want beef`)
      const z = mk([], [4, 0])
      const u = await timed(tfetch(`${base}/echo`, z, { id: '12345678' }), 'tfetch empty')
      eqShape(u, [4, 0], 'empty reply')
      if (u.provenance !== '12345678') fail(`reply provenance ${u.provenance}, want 12345678`)
    }],
    ['POST /echo: 1 MiB', async () => {
      const n = 1 << 18
      const x = sm.tensor(Float32Array.from({ length: n }, (_, i) => i * 0.5)).reshape([512, 512])
      const t = await timed(tfetch(`${base}/echo`, x), 'tfetch')
      eqShape(t, [512, 512], 'reply')
      eqArray(t.toFloat32Array(), x.toFloat32Array(), 'data')
    }],
    ['POST /accumulate: per-user sums under two Shumai ids', async () => {
      const a = randomId()
      let b = randomId()
      while (b === a) b = randomId()
      const send = async (id: string, v: number[]) => {
        const t = await timed(tfetch(`${base}/accumulate`, mk(v, [4]), { id }), `tfetch as ${id}`)
        eqShape(t, [4], `reply to ${id}`)
        if (!sameId(id, t.provenance)) fail(`reply to ${id} carries provenance ${t.provenance}`)
        return t.toFloat32Array()
      }
      eqArray(await send(a, [1, 2, 3, 4]), [1, 2, 3, 4], `${a} first sum`)
      eqArray(await send(b, [10, 20, 30, 40]), [10, 20, 30, 40], `${b} first sum`)
      eqArray(await send(a, [0.5, 0.5, 0.5, 0.5]), [1.5, 2.5, 3.5, 4.5], `${a} second sum`)
      eqArray(await send(b, [-10, 0, 10, 20]), [0, 20, 40, 60], `${b} second sum`)
    }],
    [`GET /${i32}: a stored I32 tensor is refused, saying F32`, async () => {
      await expectRefused(`${base}/${i32}`, undefined, [406, 415, 422], /F32/)
    }],
    ['GET /no_such_tensor: refused with 404', async () => {
      await expectRefused(`${base}/no_such_tensor_shumai`, undefined, [404], /no_such_tensor_shumai|no such/i)
    }],
  ]

  let passed = 0
  let failed = 0
  for (const [name, fn] of checks) {
    try {
      await fn()
      passed++
      console.log(`ok ${passed + failed} - ${name}`)
    } catch (e) {
      failed++
      console.log(`not ok ${passed + failed} - ${name}: ${e instanceof Error ? e.message : e}`)
    }
  }
  console.log(`shumai client: ${passed} passed, ${failed} failed`)
  return failed === 0
}

async function main() {
  const [cmd, arg] = process.argv.slice(2)
  if (cmd === 'fixtures' && arg) {
    await Bun.write(`${arg}/f32.bin`, F32)
    await Bun.write(`${arg}/i32.bin`, I32)
    return
  }
  if (cmd === 'test') {
    const base = process.env.TFETCH_URL
    if (!base) fail('TFETCH_URL is not set')
    process.exit((await runTests(base.replace(/\/+$/, ''))) ? 0 : 1)
  }
  console.error('usage: bun run client.ts fixtures DIR | test')
  process.exit(2)
}

await main()
