"""The non-CLI logic of ``ampcap dump``: records, rendering, correlation,
pcap reading with TCP reassembly, and the trio live tap."""
