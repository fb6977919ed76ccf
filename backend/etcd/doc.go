// Package etcd is a Leasehold store on etcd.
package etcd
