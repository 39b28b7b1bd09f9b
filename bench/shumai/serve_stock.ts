// serve_stock.ts - Shumai's own sm.network.serve (shumai/network/model.ts, unmodified) with
// our stand-in tensor module, serving the routes tfetchd offers to Shumai clients:
//   echo        the tensor back (serve() stamps the caller's provenance on the reply)
//   accumulate  a per-user running sum (serve() keys user state by provenance)
//   shumai_f32  GET: the F32 [2,3] fixture tests/shumai/client.ts expects
// Listens on 127.0.0.1, port TFETCH_STOCK_PORT or one of the system's choosing, and prints
// "listening on http://127.0.0.1:PORT". Runs from a scratch directory laid out by
// tests/shumai/setup.sh (bench/shumai/run.sh copies it there).
import { serve } from './shumai/network/model'
import * as sm from './shumai/tensor'

const fixture = Float32Array.of(0.5, -1, 2.25, 3, -4.5, 1e10)

// serve() does not return Bun's server; catch it on the way to learn the port it got.
let server: { port: number } | null = null
const bunServe = Bun.serve.bind(Bun)
// eslint-disable-next-line @typescript-eslint/no-explicit-any
;(Bun as any).serve = (opts: any) => (server = bunServe(opts))

serve(
  {
    echo: (_user: unknown, t: sm.Tensor) => t,
    accumulate: (user: { sum?: Float32Array; shape?: number[] }, t: sm.Tensor) => {
      const x = t.toFloat32Array()
      if (!user.sum || user.sum.length !== x.length) {
        user.sum = x
      } else {
        for (let i = 0; i < x.length; i++) user.sum[i] += x[i]
      }
      return sm.tensor(user.sum.slice()).reshape(t.shape)
    },
    shumai_f32: () => sm.tensor(fixture.slice()).reshape([2, 3])
  },
  {
    hostname: '127.0.0.1',
    port: Number(process.env.TFETCH_STOCK_PORT || 0),
    maxRequestBodySize: 1 << 30
  }
)
if (!server) throw 'Bun.serve was not called'
console.log(`listening on http://127.0.0.1:${server.port}`)
