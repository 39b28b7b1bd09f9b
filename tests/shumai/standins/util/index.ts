// Stand-in for shumai/util/index.ts: the two helpers the network code imports, written as in
// Shumai's util/async.ts.
export function sleep(ms: number) {
  return new Promise((r) => {
    setTimeout(r, ms)
  })
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function all<T extends any[]>(...args: Promise<T[number]>[]): Promise<Awaited<T>[]> {
  return Promise.all<T>(args)
}
