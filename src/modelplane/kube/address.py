"""Which addresses the operator may send a target's requests to.

Whoever writes a kubeconfig Secret on the hub chooses where the operator
connects, so a kubeconfig can aim it at the cloud metadata service (which
hands out the node's credentials to anyone who asks) or at a service inside
the hub's own network. The operator refuses every address in a deny list,
link-local and the metadata addresses by default, and decides on the
addresses a name *resolves to*, every one of them: a name that resolves to a
refused address anywhere in its answer is refused.

The default list, and who uses what:

- ``169.254.0.0/16`` (IPv4 link-local, RFC 3927): the metadata service of AWS,
  Google Cloud, Azure, Oracle Cloud, OpenStack and DigitalOcean at
  169.254.169.254; ECS task metadata (169.254.170.2) and the EKS Pod Identity
  Agent (169.254.170.23); Tencent Cloud (169.254.0.23).
  https://learn.microsoft.com/azure/virtual-machines/instance-metadata-service,
  https://docs.oracle.com/en-us/iaas/Content/Compute/Tasks/gettingmetadata.htm,
  https://cloud.google.com/compute/docs/metadata/querying-metadata
- ``fe80::/10`` (IPv6 link-local, RFC 4291): OpenStack's IPv6 metadata
  address fe80::a9fe:a9fe.
  https://specs.openstack.org/openstack/neutron-specs/specs/ussuri/metadata-add-ipv6-support.html
- ``fd00:ec2::254/128``: the EC2 instance metadata service over IPv6
  (``HttpProtocolIpv6``), and ``fd00:ec2::23/128``, the EKS Pod Identity
  Agent over IPv6. Both are unique-local addresses, not link-local.
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_InstanceMetadataOptionsRequest.html,
  https://docs.aws.amazon.com/eks/latest/userguide/pod-id-agent-setup.html
- ``fd20:ce::254/128``: Google Compute Engine's metadata server for IPv6-only
  VMs (dual-stack VMs reach it over IPv4 only).
  https://cloud.google.com/compute/docs/metadata/querying-metadata
- ``100.100.100.200/32``: Alibaba Cloud ECS instance metadata (in the shared
  address space 100.64.0.0/10, not link-local).
  https://www.alibabacloud.com/help/en/ecs/user-guide/view-instance-metadata
- ``168.63.129.16/32``: Azure's WireServer, the platform endpoint every VM
  reaches (VM agent, extension settings, DHCP, DNS); Microsoft asks that it be
  treated like 169.254.169.254.
  https://learn.microsoft.com/azure/virtual-network/what-is-ip-address-168-63-129-16

- ``0.0.0.0/8`` ("this network", RFC 1122 3.2.1.3) and ``::/128`` (the
  unspecified IPv6 address, RFC 4291 2.5.2): never a destination, yet Linux
  connects a socket aimed at 0.0.0.0 or ``::`` to the host itself, so
  ``https://0.0.0.0``, ``https://[::]`` and ``https://0`` (which the
  resolver reads as 0.0.0.0) would reach the operator's own pod: its
  metrics port and anything else listening there. All of 0/8 is taken,
  not just 0.0.0.0: no host has such an address to connect to.

Loopback stays allowed: a target on 127.0.0.1 is how a hub reaches a cluster
through a local tunnel, and how the tests run.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from urllib.parse import urlsplit

import httpx2

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# (host, port) -> every address the name resolves to, in the resolver's order.
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]

DEFAULT_DENIED: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(cidr)
    for cidr in (
        "169.254.0.0/16",
        "fe80::/10",
        "fd00:ec2::254/128",
        "fd00:ec2::23/128",
        "fd20:ce::254/128",
        "100.100.100.200/32",
        "168.63.129.16/32",
        "0.0.0.0/8",
        "::/128",
    )
)
# Keywords a --deny-target-cidr value may be instead of a CIDR.
DEFAULT_KEYWORD = "default"
NONE_KEYWORD = "none"
# RFC 6052's well-known NAT64 prefix carries an IPv4 address in its last 32
# bits; on a NAT64 network it reaches that IPv4 address.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class AddressDenied(httpx2.ConnectError):
    """A target's host is, or resolves to, an address the operator refuses.

    A ``ConnectError`` so that whatever handles "cannot connect" handles it;
    the message names the host, the address and the range, and is safe to show.
    """

    def __init__(self, host: str, address: IPAddress, network: IPNetwork) -> None:
        shown = f"{host} resolves to {address}" if host != str(address) else f"{host} is"
        super().__init__(
            f"the target address is refused: {shown}, in the denied range {network} "
            "(--deny-target-cidr)"
        )
        self.host = host
        self.address = address
        self.network = network


def parse_cidr(text: str) -> IPNetwork:
    """One CIDR (a bare address is a /32 or /128); ValueError says what is wrong."""
    try:
        return ipaddress.ip_network(text.strip(), strict=True)
    except ValueError as err:
        raise ValueError(f"{err}; expected a CIDR such as 169.254.0.0/16 or fd00::/8") from err


def deny_list(values: Sequence[str] | None) -> tuple[IPNetwork, ...]:
    """The deny list from --deny-target-cidr values; no values means the default.

    Values replace the default rather than add to it, so that a range the
    default holds can be allowed; ``default`` stands for the default list and
    ``none`` for an empty one.
    """
    if not values:
        return DEFAULT_DENIED
    out: list[IPNetwork] = []
    for value in values:
        if value.strip() == DEFAULT_KEYWORD:
            out += DEFAULT_DENIED
        elif value.strip() == NONE_KEYWORD:
            continue
        else:
            out.append(parse_cidr(value))
    return tuple(dict.fromkeys(out))


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def denied_by(address: IPAddress, deny: Iterable[IPNetwork]) -> IPNetwork | None:
    """The first range of ``deny`` that holds ``address``, or None when it is allowed.

    An IPv6 address that carries an IPv4 one (``::ffff:169.254.169.254``, or
    NAT64's ``64:ff9b::a9fe:a9fe``) reaches that IPv4 address, so it is judged
    as that one too.
    """
    candidates: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            # A zone index (fe80::1%eth0) does not change which range holds it.
            address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
            candidates = [address]
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            candidates.append(embedded)
    for network in deny:
        for candidate in candidates:
            if candidate.version == network.version and candidate in network:
                return network
    return None


def check_addresses(host: str, addresses: Iterable[IPAddress], deny: Iterable[IPNetwork]) -> None:
    """Raise ``AddressDenied`` if any of the addresses ``host`` resolved to is refused."""
    deny = tuple(deny)
    for address in addresses:
        network = denied_by(address, deny)
        if network is not None:
            raise AddressDenied(host, address, network)


def literal(host: str) -> IPAddress | None:
    """The address when ``host`` is an IP literal (brackets allowed), else None."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to for a TCP connection, first answer first."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        # The resolver's own words (e.g. "Name or service not known") are local.
        raise httpx2.ConnectError(f"cannot resolve {host}: {err.strerror}") from err
    out: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        ip = ipaddress.ip_address(sockaddr[0])
        if ip not in out:
            out.append(ip)
    if not out:
        raise httpx2.ConnectError(f"cannot resolve {host}: no address")
    return out


async def vet(
    host: str, port: int, deny: Iterable[IPNetwork], resolver: Resolver = resolve
) -> list[IPAddress]:
    """Resolve ``host`` and refuse it if any address is denied; the addresses otherwise."""
    ip = literal(host)
    addresses = [ip] if ip is not None else await resolver(host, port)
    check_addresses(host, addresses, deny)
    return addresses


def host_and_port(server: str) -> tuple[str, int]:
    """Host and port of a kubeconfig ``server`` URL; ValueError when it has none."""
    parts = urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("the server is not an http:// or https:// URL with a host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.hostname, port
