module github.com/leasehold/leasehold

go 1.26.8
