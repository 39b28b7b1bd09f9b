#!/bin/sh
# mkcert.sh DIR [DAYS] - a throwaway CA (DIR/ca.pem) and a server certificate it signed for
# 127.0.0.1 (DIR/srv.pem, key DIR/srv.key: ECDSA P-256), made with certtool (GnuTLS, Debian:
# gnutls-bin), as tests/check_tls.c makes its own. For tests and bench/ only: the keys are
# unprotected and the certificates expire after DAYS (default 2) days. Exits 77 (automake
# SKIP) when certtool is missing, 1 if it fails.
set -eu
dir=$1
days=${2:-2}
command -v certtool >/dev/null 2>&1 || { echo "mkcert.sh: no certtool (Debian: gnutls-bin)" >&2; exit 77; }
cd "$dir"
printf 'cn = "tfetch throwaway CA"\nca\ncert_signing_key\nexpiration_days = %s\n' "$days" >ca.tmpl
printf 'cn = "127.0.0.1"\nip_address = "127.0.0.1"\ndns_name = "localhost"\ntls_www_server\nexpiration_days = %s\n' \
    "$days" >srv.tmpl
{
    certtool --generate-privkey --key-type=ecdsa --outfile ca.key &&
    certtool --generate-self-signed --load-privkey ca.key --template ca.tmpl --outfile ca.pem &&
    certtool --generate-privkey --key-type=ecdsa --outfile srv.key &&
    certtool --generate-certificate --load-privkey srv.key --load-ca-certificate ca.pem \
        --load-ca-privkey ca.key --template srv.tmpl --outfile srv.pem
} >mkcert.log 2>&1 || { cat mkcert.log >&2; exit 1; }
rm -f ca.tmpl srv.tmpl mkcert.log
chmod 600 ca.key srv.key
