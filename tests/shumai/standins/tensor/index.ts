// Stand-in for shumai/tensor: a minimal float32 tensor with the members that Shumai's
// io/encode.ts, network/tensor.ts and network/model.ts touch. The real module is a binding
// to flashlight/ArrayFire (no Debian package), so it cannot load here.
//
// Differences that matter when reading timings: tensor() keeps a view of the caller's array
// where Shumai copies it into ArrayFire memory; toFloat32Array() copies, as Shumai's does
// (encodeBinary sends its whole .buffer, so it must be exactly the elements).

export enum dtype {
  Float16,
  Float32,
  Float64,
  BoolInt8,
  Int16,
  Int32,
  Int64,
  BigInt64,
  Uint8,
  Uint16,
  Uint32,
  Uint64,
  BigUint64
}

export function typeToString(dt: dtype): string {
  return dtype[dt] ?? 'Float32'
}

export function stringToType(str: string): dtype {
  const v = (dtype as unknown as Record<string, dtype>)[str.trim()]
  return v === undefined ? dtype.Float32 : v
}

type ShapeLike = ArrayLike<number | bigint>

function toShape(shape: ShapeLike): number[] {
  const out: number[] = []
  for (let i = 0; i < shape.length; i++) {
    const d = Number(shape[i])
    if (!Number.isSafeInteger(d) || d < 0) throw `bad dim ${shape[i]}`
    out.push(d)
  }
  return out
}

function count(shape: number[]): number {
  return shape.reduce((a, b) => a * b, 1)
}

export class Tensor {
  data: Float32Array
  _shape: number[]
  requires_grad = false
  provenance: string | null = null
  op = 'tensor'
  deps: Tensor[] = []
  stats: unknown = null
  grad: Tensor | null = null
  grad_callback_async: ((grad?: unknown) => Promise<void | Tensor>) | null = null

  constructor(data: Float32Array, shape?: ShapeLike) {
    this.data = data
    this._shape = shape ? toShape(shape) : [data.length]
    if (count(this._shape) !== data.length)
      throw `shape [${this._shape}] does not hold ${data.length} elements`
  }

  get shape(): number[] {
    return this._shape.slice()
  }

  get shape64(): BigInt64Array {
    return new BigInt64Array(this._shape.map((d) => BigInt(d)))
  }

  get ndim(): number {
    return this._shape.length
  }

  get elements(): number {
    return this.data.length
  }

  get dtype(): dtype {
    return dtype.Float32
  }

  reshape(shape: ShapeLike): Tensor {
    const t = new Tensor(this.data, shape)
    t.provenance = this.provenance
    t.requires_grad = this.requires_grad
    return t
  }

  toFloat32Array(): Float32Array {
    return this.data.slice()
  }

  valueOf() {
    return this.data.length === 1 ? this.data[0] : this.toFloat32Array()
  }

  setDeps(deps: Tensor[]) {
    this.deps = deps
  }

  requireGrad(): Tensor {
    this.requires_grad = true
    return this
  }

  detach(): Tensor {
    return new Tensor(this.data, this._shape)
  }
}

export function tensor(arr: Float32Array | ArrayLike<number>): Tensor {
  return new Tensor(arr instanceof Float32Array ? arr : Float32Array.from(arr))
}

export function full(shape: ShapeLike, v: number): Tensor {
  const s = toShape(shape)
  return new Tensor(new Float32Array(count(s)).fill(v), s)
}

export function scalar(v: number): Tensor {
  return new Tensor(Float32Array.of(v), [])
}
