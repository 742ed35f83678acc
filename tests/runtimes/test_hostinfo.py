from runtimes.hostinfo import describe_host
from runtimes.memory import current_rss_mb, peak_rss_mb

# /proc/cpuinfo of a Raspberry Pi 4 running 64-bit Raspberry Pi OS (first core shown).
PI4_CPUINFO = """processor	: 0
BogoMIPS	: 108.00
Features	: fp asimd evtstrm crc32 cpuid
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x0
CPU part	: 0xd08
CPU revision	: 3

Hardware	: BCM2835
Revision	: c03114
Serial		: 10000000abcdef01
Model		: Raspberry Pi 4 Model B Rev 1.4
"""


def test_describe_a_raspberry_pi_from_its_cpuinfo():
    host = describe_host(cpuinfo=PI4_CPUINFO, device_model="Raspberry Pi 4 Model B Rev 1.4")
    assert host["cpu"] == "Raspberry Pi 4 Model B Rev 1.4"
    assert host["cpu_flags"] == ["asimd"]
    assert host["device_model"].startswith("Raspberry Pi 4")


def test_describe_this_host():
    host = describe_host()
    assert host["arch"] and host["cores"] >= 1 and host["memory_mb"] > 0


def test_peak_memory_is_at_least_current():
    assert peak_rss_mb() >= current_rss_mb() > 0


# What /proc/cpuinfo says inside an arm64 userland run by qemu-user on an x86 machine:
# the host's own file, passed through.
X86_CPUINFO = """processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model name	: AMD EPYC 7B13
flags		: fpu sse sse2 avx avx2 fma
"""


def test_an_arm_userland_on_an_x86_cpu_is_labelled_emulated():
    host = describe_host(cpuinfo=X86_CPUINFO, device_model="", arch="aarch64")
    assert host["emulated"] and "x86" in host["emulated"] and "AMD EPYC" in host["emulated"]
    native = describe_host(cpuinfo=PI4_CPUINFO, device_model="Raspberry Pi 4", arch="aarch64")
    assert native["emulated"] is None
