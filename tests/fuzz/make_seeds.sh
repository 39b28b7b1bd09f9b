#!/bin/sh
# make_seeds.sh DIR - writes a few valid safetensors documents into DIR as a seed corpus
# for fuzz_safetensors (the fuzzer finds its way faster from valid inputs).
set -eu
dir=${1:?usage: make_seeds.sh DIR}
mkdir -p "$dir"

# seed NAME JSON DATA_BYTES: 8-byte little-endian header length, header, DATA_BYTES bytes.
seed() {
    n=$(printf '%s' "$2" | wc -c)
    {
        i=0
        v=$n
        while [ $i -lt 8 ]; do
            printf "\\$(printf '%03o' $((v % 256)))"
            v=$((v / 256))
            i=$((i + 1))
        done
        printf '%s' "$2"
        head -c "$3" /dev/zero | tr '\0' '\141'
    } > "$dir/$1"
}

seed empty '{}' 0
seed padded '{}      ' 0
seed one '{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}' 16
seed meta '{"__metadata__":{"format":"pt"},"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}' 3
seed scalar '{"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}}' 8
seed zero '{"z":{"dtype":"BF16","shape":[0,4],"data_offsets":[0,0]},"b":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}}' 1
seed order '{"b":{"dtype":"I16","shape":[2],"data_offsets":[2,6]},"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}' 6
