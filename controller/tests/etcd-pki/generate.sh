#!/usr/bin/env bash
# Regenerates the test PKI of controller/tests/it/etcd.rs, laid out as kubeadm lays out an etcd PKI: a CA, a server
# certificate for the members (serverAuth and clientAuth, as kubeadm's etcd/server.crt; etcd's JSON gateway dials
# its own listener with it) valid for 127.0.0.1 and localhost, and a client certificate (the apiserver's). Test
# keys only: they protect etcd clusters on loopback ports that live for one test.
set -euo pipefail
cd "$(dirname "$0")"
days=36500
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days "$days" -subj "/CN=etcd-ca" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"
sign() { # name subject extensions
  openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days "$days" \
    -extfile <(printf '%s\n' "$3")
  rm "$1.csr"
}
sign server "/CN=etcd-server" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
sign client "/CN=kube-apiserver-etcd-client" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
rm -f ca.key ca.srl
