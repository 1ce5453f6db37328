# Walks this interpreter's own context stack with raw reads (unpack "P"), using the
# offsets from the 5.36 headers, to check them end to end.
use strict; use warnings;
sub rd  { my ($a,$n)=@_; return unpack("P$n", pack("Q",$a)); }
sub q64 { unpack "Q", rd($_[0],8) }
sub u32 { unpack "L", rd($_[0],4) }
sub i32 { unpack "l", rd($_[0],4) }
sub cstr { my $a=shift; my $s=""; for(;;){ my $c=rd($a++,1); last if $c eq "\0"; $s.=$c; last if length $s > 200 } $s }
my ($base) = map { /^([0-9a-f]+)-/ ? hex($1) : () } grep { m{ /usr/bin/perl5?\S*$} } do { open my $f, "<", "/proc/self/maps" or die; <$f> };
my $curinterp = $base + 0x3a66d8;   # PL_curinterp (st_value in /usr/bin/perl; PIE, first mapping offset 0)
sub hek { my $h=shift; return undef unless $h; my $len=i32($h+4); rd($h+8,$len) }
sub hvname { my $hv=shift; return "?" unless $hv; my $flags=u32($hv+0xc); return "?" unless ($flags & 0xff)==12 && ($flags & 0x02000000);
  my $body=q64($hv); my $aux=$body+0x20; my $cnt=i32($aux+0x1c); my $n=q64($aux); $n=q64($n) if $cnt; hek($n) // "__ANON__" }
sub cvname { my $cv=shift; my $fl=u32($cv+0xc); return sprintf("notcv(%x)",$fl) unless ($fl&0xff)==13;
  my $b=q64($cv); my $cvf=u32($b+0x5c); my $u=q64($b+0x38); my ($name,$stash);
  if ($cvf & 0x8000) { $name=hek($u); $stash=q64($b+0x20) } else { my $gb=q64($u); $name=hek(q64($gb+0x20)); $stash=q64($gb+0x28) }
  my $start=q64($b+0x28); my $defl = ($start && ((unpack("S",rd($start+0x20,2)) & 0x1ff)==195)) ? u32($start+0x24) : 0;
  sprintf("%s::%s%s [cvflags %x, file %s, first stmt line %d]", hvname($stash), $name, ($cvf&0x8000)?" (NAMED)":"", $cvf, cstr(q64($b+0x40)), $defl) }
sub cop { my $c=shift; $c ? sprintf("%s:%d", cstr(q64($c+0x30)), u32($c+0x24)) : "-" }
sub walk {
  my $my_perl = q64($curinterp);
  my $cop = q64($my_perl+0xd0);
  my $si = q64($my_perl+0xe0);
  print "PL_curcop ", cop($cop), "\n";
  while ($si) {
    my ($cx0,$ix,$type)=(q64($si+8), i32($si+0x20), i32($si+0x2c));
    print "stackinfo type $type cxix $ix\n";
    for (my $i=$ix; $i>=0; $i--) {
      my $cx=$cx0+$i*104; my $t=unpack("C",rd($cx,1));
      my $line = sprintf "  cx[%d] type %d flags %02x oldcop %s", $i, $t&0xf, $t&0xf0, cop(q64($cx+0x10));
      if (($t&0xf)==9) { $line .= sprintf " retop %x sub %s", q64($cx+0x30), cvname(q64($cx+0x48)) }
      if (($t&0xf)==11) { $line .= sprintf " oldop %d", unpack("S",rd($cx+2,2))>>7 }
      print "$line\n";
    }
    $si = q64($si+0x10);  # si_prev
  }
}
sub inner { walk() }
# `perl walk.pl` (default): a sort block, a closure, a string eval; `perl walk.pl callbacks`:
# the callbacks that re-enter runops (List::Util's first, a tied FETCH, a DESTROY).
use List::Util qw(first);
package Foo; sub meth { my $f = sub { main::inner() }; $f->() }
package T; sub TIESCALAR { bless {}, shift } sub FETCH { main::inner(); 1 }
package D; sub new { bless {}, shift } sub DESTROY { main::inner() }
package main;
sub outer { my @x = sort { Foo::meth(); $a <=> $b } (2,1); eval "Foo::meth(); 1" or die $@ }
sub viafirst { first { inner(); 1 } (1) }
sub viatie { tie my $x, "T"; my $y = $x }
sub viadestroy { { my $d = D->new } }
# Statement modifiers, not blocks: a block would push a context of its own.
my $callbacks = ($ARGV[0] // "") eq "callbacks";
outer() unless $callbacks;
printf("PL_runops=%#x runops_standard=%#x\n", q64(q64($curinterp)+0x8f0), $base+0x119f20),
  print("== first\n"), viafirst(), print("== tie\n"), viatie(), print("== destroy\n"),
  viadestroy() if $callbacks;
