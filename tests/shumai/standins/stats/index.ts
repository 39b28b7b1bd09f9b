// Stand-in for shumai/stats: the real module loads flashlight (ArrayFire) through FFI at import
// time. network/tensor.ts only calls Stats.fromJSON on a reply that carries props.stats, and
// network/model.ts (serve) only makes a Stats when a request asks for collectStats: an inert
// state bag is enough for both.
export class Stats {
  enabled: boolean
  hostId = 'standin'
  processId = String(process.pid)
  deviceId = 'unknown'
  constructor(opts?: { enabled?: boolean; logger?: unknown }) {
    this.enabled = opts?.enabled === true
  }
  toJSON() {
    return {}
  }
  addRemoteStats(_: Stats) {}
  static fromJSON(_: object): Stats {
    return new Stats({ enabled: false })
  }
}

export const stats = new Stats({ enabled: false })
