# Exercise the v4.1 operations a Linux client sends, for a packet capture
# (tools/nfs4wire): a mount, listings, reads, writes (stable and unstable,
# committed), creates of every kind, links, renames, attribute changes,
# locks, removals and the unmount.
. /job/lib.sh
do_mount
M=$MNT
ls -l $M/dir > $R/ls.out 2>&1
cat $M/dir/hello.txt > $R/cat.out 2>&1
echo "written by the guest" > $M/dir/new.txt
dd if=/dev/zero of=$M/dir/sync.bin bs=4096 count=2 conv=fsync 2>>$R/dd.out
dd if=/dev/zero of=$M/dir/big.bin bs=1M count=2 2>>$R/dd.out
sync
mkdir $M/dir/sub
ln -s hello.txt $M/dir/link
ln $M/dir/new.txt $M/dir/hard
mv $M/dir/hard $M/dir/hard2
chmod 0640 $M/dir/new.txt
touch -d '2001-02-03 04:05:06' $M/dir/new.txt
flock $M/dir/new.txt true
flock -s $M/dir/hello.txt true
stat -f $M > $R/statfs.out
drop_caches
readlink $M/dir/link > $R/readlink.out
stat $M/dir/sub/.. > $R/stat.out
rm $M/dir/hard2 $M/dir/link $M/dir/big.bin
rmdir $M/dir/sub
ls -la $M/dir >> $R/ls.out 2>&1
do_umount
sleep 5
