"""Shows how PyTorch's ONNX exporter treats two example inputs that are the same
tensor: exports a wrapper computing cross_entropy(model(input_ids), labels) twice,
once with labels = input_ids (one tensor) and once with a distinct labels tensor,
and prints which graph input the embedding's Gather reads in each."""
import torch, torch.nn as nn, torch.nn.functional as F, onnx

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(32, 8)
        self.head = nn.Linear(8, 32)
    def forward(self, ids):
        return self.head(self.tok(ids))

class Loss(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = M()
    def forward(self, input_ids, labels):
        return F.cross_entropy(self.m(input_ids).reshape(-1, 32), labels.reshape(-1))

w = Loss().eval()
ids = torch.randint(0, 32, (2, 16))
for name, labels in [("aliased (labels is input_ids)", ids), ("distinct", ids.clone())]:
    b, s = torch.export.Dim("batch"), torch.export.Dim("seq")
    prog = torch.onnx.export(w, (ids, labels), dynamo=True, input_names=["input_ids", "labels"],
                             dynamic_shapes={"input_ids": {0: b, 1: s}, "labels": {0: b, 1: s}})
    g = prog.model_proto.graph
    gathers = [list(n.input) for n in g.node if n.op_type == "Gather"]
    print(f"{name}: graph inputs {[i.name for i in g.input]}; Gather inputs {gathers}")
