#!/bin/sh
# A vat written as a shell script, to show that any program works. The wall
# gives it $TOYBOX_LISTEN (a unix socket path) and $TOYBOX_DATA (its folder).
# A shell cannot listen on a unix socket by itself, so perl (part of every
# Debian system) holds the socket and runs this same script with "handle"
# once per connection, the connection on stdin and stdout. Everything the vat
# says is decided here, in sh.
set -eu
if [ "${1:-}" = handle ]; then
	read -r method path _
	# Drain the request headers up to the blank line.
	cr=$(printf '\r')
	while read -r line; do
		[ "$line" = "$cr" ] || [ -z "$line" ] && break
	done
	n=$(cat "$TOYBOX_DATA/hits" 2>/dev/null || echo 0)
	n=$((n + 1))
	echo "$n" >"$TOYBOX_DATA/hits.tmp" && mv "$TOYBOX_DATA/hits.tmp" "$TOYBOX_DATA/hits"
	body="sh says hello: $method $path, hit $n"
	printf 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n' $((${#body} + 1)) "$body"
	exit 0
fi
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
rm -f "$TOYBOX_LISTEN"
exec perl -MIO::Socket::UNIX -e '
	my $s = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Local => $ENV{TOYBOX_LISTEN}, Listen => 16)
		or die "listen on $ENV{TOYBOX_LISTEN}: $!\n";
	$SIG{CHLD} = "IGNORE";
	while (1) {
		my $c = $s->accept or next;
		my $pid = fork;
		if (defined $pid && $pid == 0) {
			open(STDIN, "<&", $c) or die; open(STDOUT, ">&", $c) or die;
			exec($ARGV[0], "handle") or die "exec: $!\n";
		}
		close $c;
	}' "$self"
