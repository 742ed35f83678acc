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
