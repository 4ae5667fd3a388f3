"""The importer's mapping of broker.xml shapes the Artemis example files do not all show."""

from __future__ import annotations

import pytest

from pagemq.tools.artemis_import import artemis_size, import_broker_xml

XML = """<?xml version="1.0"?>
<configuration xmlns="urn:activemq" xmlns:xi="http://www.w3.org/2001/XInclude">
  <core xmlns="urn:activemq:core">
    <global-max-size>100Mb</global-max-size>
    <page-sync-timeout>2000000</page-sync-timeout>
    <journal-datasync>false</journal-datasync>
    <xi:include href="more.xml"/>
    <acceptors>
      <acceptor name="tls">tcp://0.0.0.0:61614?protocols=STOMP;sslEnabled=true;keyStorePath=k.jks</acceptor>
      <acceptor name="stomp">tcp://127.0.0.1:61613?protocols=STOMP</acceptor>
    </acceptors>
    <address-settings>
      <address-setting match="orders.#">
        <max-delivery-attempts>0</max-delivery-attempts>
        <max-size-bytes>512KiB</max-size-bytes>
        <address-full-policy>block</address-full-policy>
      </address-setting>
    </address-settings>
    <addresses>
      <address name="orders">
        <anycast>
          <queue name="orders.eu" max-consumers="2"><filter string="region = 'eu'"/></queue>
          <queue name="orders.all"><durable>false</durable></queue>
        </anycast>
        <multicast/>
      </address>
      <address name="events">
        <multicast><queue name="audit"><filter string="bad selector ((("/></queue></multicast>
      </address>
      <address name="plain"><anycast><queue name="plain"/></anycast></address>
    </addresses>
  </core>
</configuration>
"""


@pytest.fixture
def imported(tmp_path):
    path = tmp_path / "broker.xml"
    path.write_text(XML)
    return import_broker_xml(path)


def test_sizes_are_powers_of_1024_as_in_artemis():
    assert [artemis_size(t) for t in ("10", "10K", "10kb", "10KiB", "10M", "10Mb", "1G", "-1")] == [
        10, 10240, 10240, 10240, 10 << 20, 10 << 20, 1 << 30, -1]
    with pytest.raises(ValueError):
        artemis_size("10 parsecs")


def test_broker_settings_acceptors_and_queues_map(imported):
    document = imported.document
    assert document["broker"] == {"global-max-size": "100MiB", "page-sync-timeout": 2000000,
                                  "journal-sync": False}
    assert document["acceptors"]["stomp"] == "127.0.0.1:61613"
    orders = next(a for a in document["addresses"] if a and a["name"] == "orders")
    assert orders["routing-type"] == "anycast"
    assert orders["queues"] == [{"name": "orders.eu", "filter": "region = 'eu'"},
                                {"name": "orders.all", "durable": False}]
    plain = next(a for a in document["addresses"] if a and a["name"] == "plain")
    assert "queues" not in plain  # an anycast address's own queue is implicit
    settings = document["address-settings"]["orders.#"]
    assert settings == {"max-size-bytes": "512KiB", "address-full-policy": "BLOCK"}


def test_what_cannot_be_mapped_or_is_refused_is_named(imported):
    text = "\n".join(imported.warnings)
    assert "configuration/core/include: not mapped" in text
    assert 'queue[@name="orders.eu"]/@max-consumers' in text
    assert 'address[@name="orders"]/multicast: an address has one routing type' in text
    refused = "not mapped: this pagemq refuses it"
    assert f'address-setting[@match="orders.#"]/max-delivery-attempts: {refused}' in text
    assert 'address[@name="events"]: not mapped: this pagemq refuses it' in text  # its bad filter
    assert "keystorepath" in text  # acceptor parameters that do not carry over
    assert not any(a and a["name"] == "events" for a in imported.document["addresses"])


@pytest.mark.parametrize(("core", "dropped"), [
    ("<security-enabled>true</security-enabled>", "configuration/core/security-enabled"),
    ('<acceptors><acceptor name="stomp">tcp://127.0.0.1:8161?protocols=STOMP</acceptor></acceptors>',
     'acceptor[@name="stomp"]'),
    ('<security-enabled>true</security-enabled><acceptors>'
     '<acceptor name="stomp">tcp://0.0.0.0:61613?protocols=STOMP</acceptor></acceptors>',
     'acceptor[@name="stomp"]'),
], ids=["security-without-users-file", "acceptor-on-the-http-port", "remote-acceptor"])
def test_a_value_refused_for_a_key_the_import_did_not_write_is_taken_out(tmp_path, core, dropped):
    """The loader names a default key (`broker.users-file`, `acceptors.http`) for a value the
    import wrote: that value is taken out and named. (Before: a traceback.) Helper 41."""
    path = tmp_path / "broker.xml"
    path.write_text(f'<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">{core}'
                    "</core></configuration>")
    result = import_broker_xml(path)
    assert any(dropped in warning and "this pagemq refuses it" in warning for warning in result.warnings)
