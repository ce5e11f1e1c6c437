module hushfs

go 1.26.8
