#!/bin/sh
# make_ucx_seeds.sh DIR - writes valid UCX frame headers and upgrade JSON documents into DIR
# as a seed corpus for fuzz_ucxframe (the fuzzer finds its way faster from valid inputs).
set -eu
dir=${1:?usage: make_ucx_seeds.sh DIR}
mkdir -p "$dir"

# le VALUE BYTES: VALUE (non-negative) as BYTES little-endian bytes.
le() {
    v=$1
    i=0
    while [ "$i" -lt "$2" ]; do
        printf "\\$(printf '%03o' $((v % 256)))"
        v=$((v / 256))
        i=$((i + 1))
    done
}

# frame FILE OP FLAGS SEQ STATUS WAIT BODY ID USER NAME MSG HTTP (STATUS as an unsigned 32-bit)
frame() {
    f=$1 op=$2 flags=$3 seq=$4 status=$5 wait=$6 body=$7 id=$8 user=$9
    shift 9
    name=$1 msg=$2 http=${3:-0}
    {
        printf 'TFU1'
        le 2 1
        le "$op" 1
        le "$flags" 2
        le "$seq" 8
        le "$status" 4
        le "$wait" 4
        le "$body" 8
        le ${#id} 1
        le ${#user} 1
        le ${#name} 1
        le 0 1
        le "$(printf '%s' "$msg" | wc -c)" 2
        le "$http" 2
        printf '%s%s%s%s' "$id" "$user" "$name" "$msg"
    } > "$dir/$f"
}

boot=07424f66-80cc-4684-b9fd-2ab7faab3cd6
netns='net:[4026531840]'
token=0123456789abcdef0123456789abcdef

frame hello 1 0 1 0 0 0 '' '' "$token" "$boot $netns"
frame hello_ack 2 0 1 0 0 0 '' '' '' ''
frame get 3 0 2 0 100 0 req-1 alice w ''
frame put 4 0 3 0 0 1000 req-2 alice w ''
frame delete 5 0 4 0 0 0 req-3 '' w ''
frame call 6 0 5 0 0 64 host:1:7 bob echo ''
frame reply 7 1 2 0 0 1000 req-1 '' '' '' 200
frame reply_err 7 0 2 4294967291 0 0 req-1 '' w 'no such tensor' 404
frame bye 8 0 6 0 0 0 '' '' '' ''
# a PUT whose body's first 16 bytes follow the frame (flag BODY_PREFIX)
frame put_prefix 4 2 7 0 0 1000 req-4 alice w ''
printf 'prefix-16-bytes!' >> "$dir/put_prefix"
frame hello_ack_features 2 0 1 0 0 0 '' '' '' 'body-prefix feed-detach cond'

# cond BYTES FLAGS TTL FIRST LAST TOTAL IM INM ETAG: a conditions block (flag COND, 0x0200)
cond() {
    f=$1
    {
        le "$2" 1
        le ${#7} 1
        le ${#8} 1
        le ${#9} 1
        le 0 4
        le "$3" 8
        le "$4" 8
        le "$5" 8
        le "$6" 8
        printf '%s%s%s' "$7" "$8" "$9"
    } >> "$dir/$f"
}
# a PUT with If-Match and a TTL; a ranged GET with If-None-Match; a 206 reply with its ETag
frame put_cond 4 512 8 0 0 1000 req-5 alice w ''
cond put_cond 0 60 0 0 0 '"0123456789abcdef-1"' '' ''
frame get_cond 3 512 9 0 100 0 req-6 alice w ''
cond get_cond 1 0 8 15 0 '' '"0123456789abcdef-1"' ''
frame reply_cond 7 513 9 0 0 8 req-6 '' '' '' 206
cond reply_cond 1 0 8 15 100 '' '' '"0123456789abcdef-2"'

printf '%s' "{\"transports\":[\"ucx\"],\"host\":{\"boot_id\":\"$boot\",\"netns\":\"$netns\",\"pid\":1234},\"policy\":\"auto\"}" > "$dir/req"
printf '%s' "{\"transport\":\"ucx\",\"token\":\"$token\",\"expires_ms\":10000,\"worker_address\":\"Zm9vYmE=\",\"same_host\":true,\"server_pid\":4321}" > "$dir/resp"
printf '%s' '{"transport":"http","reason":"UCX is not available"}' > "$dir/refusal"
printf '%s' 'Zm9vYmFy' > "$dir/b64"
printf '%s' "$boot $netns" > "$dir/ident"
